//! rate_limit.so groups and reloads against a real traffic_server: rules of
//! a `--group` share one limiter, state carries over `config reload`, a
//! changed limit applies live, a conflict fails the rule, several entries
//! on one rule each limit, and a plugin.config line pins one copy of the .so.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{self, Conn, Response};
use ats_tests::{plugin, wait_until, Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

fn counts(results: &[std::io::Result<Response>]) -> BTreeMap<u16, usize> {
    client::status_counts(results)
}

/// `n` requests at once, alternating between `hosts`, each held `delay_ms` at the origin.
fn storm(
    ts: &TrafficServer,
    hosts: &'static [&'static str],
    n: usize,
    delay_ms: u64,
) -> Vec<std::io::Result<Response>> {
    let port = ts.port();
    client::burst(n, move |i| {
        client::get(
            port,
            hosts[i % hosts.len()],
            &format!("/s{i}"),
            &[("X-Origin-Delay", &delay_ms.to_string())],
        )
    })
}

/// Clients that keep `per_host` requests in flight on each host until
/// stopped; counts the answers by status.
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
                    // Bounded: at most 60 s of requests.
                    let end = Instant::now() + Duration::from_secs(60);
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                        i += 1;
                        let status = client::get(
                            port,
                            host,
                            &format!("/load{t}-{i}"),
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
            for (status, n) in t.join().expect("load thread") {
                *all.entry(status).or_insert(0) += n;
            }
        }
        all
    }
}

#[test]
fn rules_of_a_group_share_one_limit_at_the_origin() {
    let origin = Origin::start();
    let remap = rule(
        "a.test",
        &origin,
        "--group=shared --limit=2 --prefix=g --tag=a",
    ) + &rule(
        "b.test",
        &origin,
        "--group=shared --limit=2 --prefix=g --tag=b",
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let results = storm(&ts, &["a.test", "b.test"], 8, 300);
    assert_eq!(counts(&results), BTreeMap::from([(200, 8)]));
    assert_eq!(
        origin.max_in_flight(),
        2,
        "two rules of one group: 2 at the origin, not 2 each"
    );
}

#[test]
fn rules_of_a_group_that_disagree_fail_with_the_option_and_the_other_rule() {
    let origin = Origin::start();
    let remap = rule("a.test", &origin, "--group=g1 --limit=2")
        + &rule("b.test", &origin, "--group=g1 --limit=3");
    let err = TrafficServer::builder()
        .remap(remap)
        .start()
        .err()
        .expect("a conflicting group must fail remap.config");
    assert!(
        err.diags.contains(
            "--limit=3 conflicts with --limit=2 of the rule http://a.test/ in the same --group=g1"
        ),
        "{err:?}"
    );

    // On reload the old rules keep serving.
    let ts = TrafficServer::builder()
        .remap(rule("a.test", &origin, "--group=g1 --limit=2"))
        .with_manager()
        .start()
        .expect("start");
    let bad = rule("a.test", &origin, "--group=g1 --limit=2")
        + &rule("b.test", &origin, "--group=g1 --limit=2 --key=ip");
    let e = ts.reload_remap(&bad).expect_err("conflict refused");
    assert!(e.contains("--key=ip conflicts with --key=none"), "{e}");
    let r = client::get(ts.port(), "a.test", "/", &[]).expect("old rule serves");
    assert_eq!(r.status, 200);
}

#[test]
fn twenty_reloads_under_load_never_exceed_the_limit_at_the_origin() {
    let grouped = Origin::start();
    let own = Origin::start();
    let remap = |n: usize| {
        format!("# generation {n}\n")
            + &rule("a.test", &grouped, "--group=g --limit=3 --prefix=g --tag=a")
            + &rule("b.test", &grouped, "--group=g --limit=3 --prefix=g --tag=b")
            + &rule("c.test", &own, "--limit=2 --prefix=g --tag=c")
    };
    let ts = TrafficServer::builder()
        .remap(remap(0))
        .with_manager()
        .start()
        .expect("start");
    let load = Load::start(ts.port(), &["a.test", "b.test", "c.test"], 3, 40);
    assert!(wait_until(Duration::from_secs(5), || grouped.count() > 10
        && own.count() > 10));
    for n in 1..=20 {
        ts.reload_remap(&remap(n))
            .unwrap_or_else(|e| panic!("reload {n}: {e}"));
    }
    let before_stop = (grouped.count(), own.count());
    let answers = load.finish();
    assert_eq!(
        answers.keys().copied().collect::<Vec<_>>(),
        [200],
        "every request queued and served: {answers:?}"
    );
    assert!(
        before_stop.0 > 100 && before_stop.1 > 50,
        "load ran: {before_stop:?}"
    );
    assert_eq!(
        grouped.max_in_flight(),
        3,
        "the group's limit held through 20 reloads"
    );
    assert_eq!(own.max_in_flight(), 2, "an ungrouped rule's limit held too");
    assert!(!ts.diags().contains("FATAL"));
    // Each replaced rule's TXN_CLOSE hook (its slots' release) is freed
    // once the rule and its last transaction are gone: 20 generations of 3
    // rules replaced, a debug line each, by the rule's drop or by the last
    // close, and none twice.
    let freed = || {
        ts.diags()
            .matches("TXN_CLOSE hook of a rule now gone")
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || freed() >= 60),
        "{} of 60 freed",
        freed()
    );
    thread::sleep(Duration::from_secs(2));
    let d = ts.diags();
    let (by_owner, by_close) = (
        d.matches("freed (no transaction held it)").count(),
        d.matches("freed (its last transaction closed)").count(),
    );
    assert_eq!(by_owner + by_close, 60, "{by_owner} + {by_close}");
}

#[test]
fn a_reload_that_raises_the_limit_admits_waiters_at_once() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("a.test", &origin, "--limit=1"))
        .with_manager()
        .start()
        .expect("start");
    // Each request stays 30 s at the origin: longer than any reload takes
    // (traffic_manager has been seen to take 6 s on a loaded machine), so
    // "4 at once" can only mean the 3 waiters were admitted by the reload.
    let load = client::slow_burst(ts.port(), "a.test", 4, 30_000);
    assert!(wait_until(Duration::from_secs(3), || origin.in_flight() == 1));
    thread::sleep(Duration::from_millis(200));
    assert_eq!(origin.in_flight(), 1, "1 at the origin, 3 waiting");
    ts.reload_remap(&rule("a.test", &origin, "--limit=4"))
        .expect("reload");
    assert!(
        wait_until(Duration::from_secs(5), || origin.in_flight() == 4),
        "4 at the origin at once within 5 s of the reload; {} there",
        origin.in_flight()
    );
    assert!(
        ts.diags().contains("applied live: --limit 1 -> 4"),
        "{}",
        ts.diags()
    );
    // Stopping traffic_server ends the clients' waits.
    drop(ts);
    let statuses = load.join().expect("load");
    assert!(
        !statuses.contains_key(&429),
        "nobody was refused: {statuses:?}"
    );
}

#[test]
fn two_entries_on_one_rule_both_limit() {
    let origin = Origin::start();
    let so = plugin("rate_limit");
    // A per-IP rate, then a rule-wide concurrency limit.
    let remap = format!(
        "map http://two.test/ {} @plugin={so} @pparam=--key=ip @pparam=--rate=1 @pparam=--burst=2 \
         @pparam=--queue=0 @plugin={so} @pparam=--limit=1 @pparam=--queue=0 @pparam=--retry=7\n",
        origin.url()
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let from = |last: u8| Ipv4Addr::new(127, 0, 0, last);
    let get = |ip: Ipv4Addr, delay: &str| {
        Conn::open_from(ts.port(), ip)
            .and_then(|mut c| c.get("two.test", "/", &[("X-Origin-Delay", delay)]))
            .map(|r| r.status)
            .map_err(|e| e.to_string())
    };
    // The first entry: 127.0.0.2's third request in a second is over its
    // rate. Each after the last one's close: the client has the response
    // a little before ATS closes the transaction and the second entry's
    // one slot goes back (a loaded machine showed the gap).
    let after_close = || thread::sleep(Duration::from_millis(100));
    let seq: Vec<_> = (0..3)
        .map(|_| {
            let status = get(from(2), "0");
            after_close();
            status
        })
        .collect();
    assert_eq!(seq, [Ok(200), Ok(200), Ok(429)]);
    assert_eq!(
        get(from(3), "0"),
        Ok(200),
        "another address has its own rate"
    );
    after_close();
    // The second entry: one request at a time on the whole rule.
    let port = ts.port();
    let slow = thread::spawn(move || {
        Conn::open_from(port, Ipv4Addr::new(127, 0, 0, 4))
            .and_then(|mut c| c.get("two.test", "/slow", &[("X-Origin-Delay", "800")]))
            .map(|r| r.status)
            .map_err(|e| e.to_string())
    });
    assert!(wait_until(Duration::from_secs(2), || origin.in_flight() == 1));
    let refused = Conn::open_from(ts.port(), from(5))
        .and_then(|mut c| c.get("two.test", "/", &[]))
        .expect("answer");
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("Retry-After"),
        Some("7"),
        "the refusing entry's headers"
    );
    assert_eq!(slow.join().expect("thread"), Ok(200));
    assert_eq!(origin.max_in_flight(), 1);
}

/// A copy of rate_limit.so in a directory of its own, so the test can
/// replace it without touching the build's file.
fn private_copy(tag: &str) -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rl-pin-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let so = dir.join("rate_limit.so");
    ats_tests::install("rate_limit", &so, 0, None);
    so
}

/// Holds the 2 slots of a group's limit of 2 with 2 more waiting (each
/// request 30 s at the origin, so the old rule stays busy however long the
/// reload takes), replaces the .so file by another build (an upgrade: a
/// new mtime and build-id), reloads, and sends 2 new requests. Returns the
/// most requests seen at the origin at once.
fn replace_and_reload(pin: bool) -> (usize, String) {
    let origin = Origin::start();
    let so = private_copy(if pin { "pinned" } else { "unpinned" });
    let line = |limit: u32| {
        format!(
            "map http://a.test/ {} @plugin={} @pparam=--group=pin @pparam=--limit={limit}\n",
            origin.url(),
            so.display()
        )
    };
    let mut b = TrafficServer::builder().remap(line(2)).with_manager();
    if pin {
        b = b.plugin_config(format!("{}\n", so.display()));
    }
    let ts = b.start().expect("start");
    let old = client::slow_burst(ts.port(), "a.test", 4, 30_000);
    assert!(wait_until(Duration::from_secs(3), || origin.in_flight() == 2));
    ats_tests::install("rate_limit", &so, 1, Some(1));
    ts.reload_remap(&line(2)).expect("reload");
    // New requests go to the reloaded rule: pinned, they queue behind the
    // old ones in the one group; unpinned, a fresh group admits them.
    let new = client::slow_burst(ts.port(), "a.test", 2, 30_000);
    wait_until(Duration::from_secs(3), || origin.in_flight() > 2);
    let (max, diags) = (origin.max_in_flight(), ts.diags());
    drop(ts);
    for t in [old, new] {
        let statuses = t.join().expect("clients");
        assert!(!statuses.contains_key(&429), "nobody refused: {statuses:?}");
    }
    let _ = std::fs::remove_dir_all(so.parent().expect("dir"));
    (max, diags)
}

#[test]
fn a_plugin_config_line_pins_one_copy_so_a_replaced_file_keeps_the_count() {
    let (max, diags) = replace_and_reload(true);
    assert!(diags.contains("rate_limit.so is pinned"), "{diags}");
    assert_eq!(max, 2, "the reloaded rule shares the group's state");
    // Without the pin ATS loads the upgraded file as a second copy, whose
    // groups start empty: the limit is exceeded during the reload. This is
    // what the advice in docs/rate_limit.md ("Groups and reloads") prevents.
    // (A replaced file of the same build keeps the count: group_reloads.rs.)
    let (max, _) = replace_and_reload(false);
    assert!(max > 2, "an unpinned replaced copy starts at 0 (max {max})");
}

#[test]
fn several_entries_wait_for_one_entry_at_most_and_never_while_holding() {
    let origin = Origin::start();
    let so = plugin("rate_limit");
    let remap = format!(
        // Two concurrency entries with queues: a request that waits for the
        // first may not also wait for (or hold) the second.
        "map http://ab.test/ {o} @plugin={so} @pparam=--group=ga @pparam=--limit=1 @pparam=--queue=5 \
         @plugin={so} @pparam=--group=gb @pparam=--limit=1 @pparam=--queue=5\n\
         map http://ba.test/ {o} @plugin={so} @pparam=--group=gb @pparam=--limit=1 @pparam=--queue=5 \
         @plugin={so} @pparam=--group=ga @pparam=--limit=1 @pparam=--queue=5\n\
         map http://rq.test/ {o} @plugin={so} @pparam=--key=ip @pparam=--rate=100 @pparam=--queue=0 \
         @plugin={so} @pparam=--limit=1 @pparam=--queue=5\n",
        o = origin.url()
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    // A holds ga and gb; B (same order) waits for ga and is refused by gb
    // rather than waiting for both; C (the other order) waits for gb and is
    // refused by ga. Without the rule, B holding ga (after A) while waiting
    // for gb, and C holding gb while waiting for ga, could deadlock.
    let a = client::slow_burst(ts.port(), "ab.test", 1, 1500);
    assert!(wait_until(Duration::from_secs(3), || origin.in_flight() == 1));
    let b = client::get(ts.port(), "ab.test", "/b", &[]).expect("b");
    let c = client::get(ts.port(), "ba.test", "/c", &[]).expect("c");
    assert_eq!((b.status, c.status), (429, 429));
    assert_eq!(counts_of(a), BTreeMap::from([(200, 1)]));
    // A rate entry that never holds a slot does not stop the second entry's queue.
    origin.reset_max_in_flight();
    let queued = client::slow_burst(ts.port(), "rq.test", 3, 300);
    assert_eq!(counts_of(queued), BTreeMap::from([(200, 3)]));
    assert_eq!(origin.max_in_flight(), 1);
}

fn counts_of(t: thread::JoinHandle<BTreeMap<u16, usize>>) -> BTreeMap<u16, usize> {
    t.join().expect("clients")
}
