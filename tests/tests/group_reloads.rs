//! A `--group`'s count over reloads while the .so file is replaced by the
//! same build (issue 30, defect 6): two rules in one group, 50 clients,
//! `traffic_ctl config reload` every 1.2 s as an operator (or a script)
//! would send them, and between them the plugin file written anew, as a
//! package reinstall does, or another test binary of this workspace
//! starting (the harness copies the plugins again). ATS's dynamic reload
//! takes the new mtime for a new plugin and loads a second copy; the
//! group must still admit 4 at once, not 4 per copy.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use ats_tests::{client, install, wait_until, Origin, TrafficServer};

const LIMIT: usize = 4;
/// Replacements of the .so, each followed by the loads that pick it up.
const ROUNDS: u64 = 3;
const RELOAD_EVERY: Duration = Duration::from_millis(1200);

/// Clients that each send one request after another to `host` until
/// stopped (at most 90 s); counts the answers by status (0: no answer).
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<BTreeMap<u16, usize>>>,
}

impl Load {
    fn start(port: u16, hosts: &[&'static str], per_host: usize, delay_ms: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &host in hosts {
            for t in 0..per_host {
                let stop = stop.clone();
                threads.push(thread::spawn(move || {
                    let mut seen = BTreeMap::new();
                    let end = Instant::now() + Duration::from_secs(90);
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                        i += 1;
                        let status = client::get(
                            port,
                            host,
                            &format!("/c{t}-{i}"),
                            &[("X-Origin-Delay", &delay_ms.to_string())],
                        )
                        .map_or(0, |r| r.status);
                        *seen.entry(status).or_insert(0) += 1;
                    }
                    seen
                }));
            }
        }
        Load { stop, threads }
    }

    fn finish(self) -> BTreeMap<u16, usize> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = BTreeMap::new();
        for t in self.threads {
            for (status, n) in t.join().expect("client thread") {
                *all.entry(status).or_insert(0) += n;
            }
        }
        all
    }
}

/// A directory of the test's own for the .so it replaces.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `touch remap.config && traffic_ctl config reload`, without waiting for
/// the load: traffic_manager coalesces requests that come faster than it
/// reloads, as in the reported runs.
fn touch_and_reload(ts: &TrafficServer) {
    let path = ts.config_dir().join("remap.config");
    let f = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("remap.config");
    f.set_modified(SystemTime::now()).expect("touch");
    drop(f);
    let out = ts.traffic_ctl(&["config", "reload"]);
    assert!(out.status.success(), "traffic_ctl config reload: {out:?}");
}

fn loads(ts: &TrafficServer) -> usize {
    ts.diags().matches("remap.config finished loading").count()
}

#[test]
fn a_group_keeps_its_count_over_reloads_that_replace_the_so_with_the_same_build() {
    let dir = Dir(std::env::temp_dir().join(format!("group-reloads-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let so = dir.0.join("rate_limit.so");
    install("rate_limit", &so, 0, None);
    let origin = Origin::start();
    let rule = |host: &str| {
        format!(
            "map http://{host}/ {} @plugin={} @pparam=--group=g @pparam=--limit={LIMIT} \
             @pparam=--queue=1000 @pparam=--tag={host}\n",
            origin.url(),
            so.display()
        )
    };
    let ts = TrafficServer::builder()
        .remap(rule("a.test") + &rule("b.test"))
        .with_manager()
        .start()
        .expect("start");
    let load = Load::start(ts.port(), &["a.test", "b.test"], 25, 50);
    assert!(wait_until(Duration::from_secs(10), || origin.count() > 20));
    // The most at the origin at once after each round.
    let mut most = Vec::new();
    for round in 1..=ROUNDS {
        install("rate_limit", &so, round, None);
        let before = loads(&ts);
        // Reload until a load has picked up the new file (traffic_manager
        // looks every few seconds), then twice more while the old rules'
        // waiters drain.
        let end = Instant::now() + Duration::from_secs(15);
        while loads(&ts) == before && Instant::now() < end {
            touch_and_reload(&ts);
            thread::sleep(RELOAD_EVERY);
        }
        assert!(loads(&ts) > before, "round {round}: no load within 15 s");
        for _ in 0..2 {
            touch_and_reload(&ts);
            thread::sleep(RELOAD_EVERY);
        }
        most.push(origin.max_in_flight());
    }
    let answers = load.finish();
    let diags = ts.diags();
    assert_eq!(
        answers.keys().copied().collect::<Vec<_>>(),
        [200],
        "every request queued and served: {answers:?}"
    );
    assert!(
        most.iter().all(|&m| m == LIMIT),
        "the most at the origin at once after each of {ROUNDS} replacements of the .so: \
         {most:?}, not {LIMIT}"
    );
    assert!(
        diags
            .matches("is the same build as a copy already loaded")
            .count()
            >= ROUNDS as usize,
        "each replaced file was taken for the loaded build: {diags}"
    );
}
