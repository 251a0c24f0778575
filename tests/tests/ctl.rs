//! `traffic_ctl plugin msg rate_limit "…"` against a real traffic_server
//! under traffic_manager: answers in rate_limit_ctl.log, live changes, bad
//! commands, and the file winning at the next load of remap.config.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{self, Conn};
use ats_tests::{wait_until, Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

/// Sends one command and returns the answer line that echoes it.
fn ctl(ts: &TrafficServer, command: &str) -> String {
    ts.plugin_msg("rate_limit", command)
}

fn ctl_tagged(ts: &TrafficServer, tag: &str, command: &str) -> String {
    ts.plugin_msg(tag, command)
}

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start")
}

#[test]
fn show_reports_live_counts_and_set_changes_the_limit_at_once() {
    let origin = Origin::start();
    let mut ts = start(rule("a.test", &origin, "--group=ctl1 --limit=2 --tag=ctl"));
    let load = client::slow_burst(ts.port(), "a.test", 5, 2500);
    assert!(wait_until(Duration::from_secs(3), || origin.in_flight() == 2));
    thread::sleep(Duration::from_millis(200));
    let shown = ctl(&ts, "show ctl1");
    for field in [
        "\"ok\":true",
        "\"id\":\"group ctl1\"",
        "\"limit\":2",
        "\"active\":2",
        "\"waiting\":3",
        "\"from\":\"http://a.test/\"",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    // The verb in the tag works too, and a rule is found by its tag.
    let by_tag = ctl_tagged(&ts, "rate_limit.show", "ctl");
    assert!(
        by_tag.contains("\"ok\":true") && by_tag.contains("\"id\":\"group ctl1\""),
        "{by_tag}"
    );

    let set = ctl(&ts, "set ctl1 limit=5");
    assert!(
        set.contains("\"ok\":true") && set.contains("\"new\":\"5\""),
        "{set}"
    );
    assert!(
        wait_until(Duration::from_secs(1), || origin.in_flight() == 5),
        "raising the limit admitted the 3 waiters at once ({} at the origin)",
        origin.in_flight()
    );
    assert!(ts.diags().contains("group ctl1: set live: --limit 2 -> 5"));
    assert_eq!(load.join().expect("load"), BTreeMap::from([(200, 5)]));
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );
}

#[test]
fn a_lowered_limit_holds_under_load_and_a_raised_one_admits_waiters_at_once() {
    let origin = Origin::start();
    let mut ts = start(rule("l.test", &origin, "--group=low --limit=4"));
    // Each request holds its slot 6 s at the origin: the checks below run
    // well inside one wave, however slow the machine (state, not timing).
    let load = client::slow_burst(ts.port(), "l.test", 10, 6000);
    assert!(wait_until(Duration::from_secs(3), || origin.in_flight() == 4));
    assert!(ctl(&ts, "set low limit=2").contains("\"ok\":true"));
    // The first 4 end after 6 s (a lowered limit preempts nobody); then
    // only 2 more reach the origin.
    assert!(
        wait_until(Duration::from_secs(12), || origin.count() >= 6
            && origin.in_flight() == 2),
        "{} received, {} at the origin",
        origin.count(),
        origin.in_flight()
    );
    origin.reset_max_in_flight();
    thread::sleep(Duration::from_millis(600));
    assert_eq!(origin.max_in_flight(), 2, "the lowered limit holds");
    assert_eq!(origin.count(), 6, "nobody else was admitted");
    let shown = ctl(&ts, "show low");
    assert!(
        shown.contains("\"active\":2") && shown.contains("\"waiting\":4"),
        "{shown}"
    );
    // Raised while 4 wait: they are admitted at once, not when a slot frees
    // (that would take the 6 s of the second wave, and leave at most 4).
    assert!(ctl(&ts, "set low limit=6").contains("\"ok\":true"));
    assert!(
        wait_until(Duration::from_millis(800), || origin.in_flight() == 6),
        "the 4 waiters went at once ({} at the origin)",
        origin.in_flight()
    );
    assert_eq!(load.join().expect("load"), BTreeMap::from([(200, 10)]));
    assert!(origin.max_in_flight() <= 6);
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );
}

#[test]
fn the_ratelimit_policy_header_follows_a_live_set_until_the_file_is_loaded() {
    let origin = Origin::start();
    let remap = |n: u32| {
        format!("# {n}\n")
            + &rule(
                "p.test",
                &origin,
                "--group=pol --limit=2 --ratelimit-headers",
            )
    };
    let mut ts = start(remap(0));
    let policy = |ts: &TrafficServer| {
        let r = ts.get("p.test", "/", &[]).expect("get");
        assert_eq!(r.status, 200);
        r.header("RateLimit-Policy").unwrap_or("").to_owned()
    };
    assert!(
        policy(&ts).contains("\"concurrency\";q=2;"),
        "{}",
        policy(&ts)
    );
    assert!(ctl(&ts, "set pol limit=7").contains("\"ok\":true"));
    assert!(
        policy(&ts).contains("\"concurrency\";q=7;"),
        "{}",
        policy(&ts)
    );
    ts.reload_remap(&remap(1)).expect("reload");
    assert!(
        policy(&ts).contains("\"concurrency\";q=2;"),
        "{}",
        policy(&ts)
    );
    assert!(ts.is_running());
}

#[test]
fn top_names_the_flooding_client() {
    let origin = Origin::start();
    let ts = start(rule(
        "k.test",
        &origin,
        "--key=ip --rate=1 --burst=2 --queue=0 --tag=top",
    ));
    let send = |last: u8, n: usize| {
        let mut c = Conn::open_from(ts.port(), Ipv4Addr::new(127, 0, 0, last)).expect("connect");
        (0..n)
            .map(|_| c.get("k.test", "/", &[]).map_or(0, |r| r.status))
            .collect::<Vec<_>>()
    };
    assert_eq!(send(3, 1), [200]);
    let flood = send(2, 12);
    assert!(
        flood.iter().filter(|&&s| s == 429).count() >= 9,
        "{flood:?}"
    );
    let top = ctl(&ts, "top top 5");
    assert!(top.contains("\"ok\":true"), "{top}");
    let first = top.find("\"key\":").map(|i| &top[i..]).unwrap_or("");
    assert!(first.starts_with("\"key\":\"ip=127.0.0.2\""), "{top}");
    assert!(ts.diags().contains("ctl top: "), "summary in diags.log");
}

#[test]
fn bad_commands_are_answered_and_change_nothing() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--group=ctl2 --limit=2"));
    for (command, error) in [
        ("shw", "unknown command 'shw': allowed show"),
        ("set nobody limit=3", "no group or rule named 'nobody'"),
        (
            "set ctl2 limit=abc",
            "'limit=abc' is invalid: allowed limit= an integer",
        ),
        ("set ctl2 rate=5", "a rate can be changed live, not added"),
        ("top ctl2", "has no --key"),
        ("set ctl2", "set: wrong arguments"),
    ] {
        let answer = ctl(&ts, command);
        assert!(answer.contains("\"ok\":false"), "{command}: {answer}");
        assert!(answer.contains(error), "{command}: {answer}");
    }
    let shown = ctl(&ts, "show ctl2");
    assert!(shown.contains("\"limit\":2"), "nothing changed: {shown}");
    assert!(ts.diags().contains("ctl: unknown command 'shw'"));
}

#[test]
fn loading_remap_config_again_restores_the_files_values() {
    let origin = Origin::start();
    let remap = |n: u32| format!("# {n}\n") + &rule("a.test", &origin, "--group=ctl3 --limit=2");
    let ts = start(remap(0));
    assert!(ctl(&ts, "set ctl3 limit=7 queue=9").contains("\"ok\":true"));
    assert!(ctl(&ts, "show ctl3").contains("\"limit\":7"));
    ts.reload_remap(&remap(1)).expect("reload");
    assert!(ts
        .diags()
        .contains("group ctl3: applied live: --limit 7 -> 2, --queue 9 -> 4294967295 (remap.config overrides the values set live by traffic_ctl plugin msg)"));
    assert!(ctl(&ts, "show ctl3").contains("\"limit\":2"));
}

#[test]
fn messages_during_reloads_under_load_do_no_harm() {
    let origin = Origin::start();
    let remap = |n: u32| {
        format!("# {n}\n")
            + &rule("a.test", &origin, "--group=ctl4 --limit=3")
            + &rule("k.test", &origin, "--key=ip --rate=50 --limit=2 --tag=k4")
    };
    let mut ts = start(remap(0));
    let load = client::slow_burst(ts.port(), "a.test", 30, 300);
    let keyed = client::slow_burst(ts.port(), "k.test", 30, 200);
    // Commands from another thread, nonstop (bounded) while reloads run here.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, root) = (stop.clone(), ts.root().to_owned());
        thread::spawn(move || {
            let mut sent = 0;
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until && sent < 500 {
                for cmd in ["show", "top k4 3", "set ctl4 limit=4", "show ctl4", "bogus"] {
                    let out = std::process::Command::new(ats_tests::ats::bin("traffic_ctl"))
                        .args(["plugin", "msg", "rate_limit", cmd])
                        .env("TS_RUNROOT", root.join("runroot.yaml"))
                        .output()
                        .expect("traffic_ctl");
                    assert!(out.status.success(), "{cmd}: {out:?}");
                    sent += 1;
                }
            }
            sent
        })
    };
    let during = |ts: &TrafficServer| ts.log("rate_limit_ctl.log").lines().count();
    let mut answered_during_reloads = 0;
    for n in 1..=5 {
        let before = during(&ts);
        ts.reload_remap(&remap(n)).expect("reload");
        answered_during_reloads += during(&ts) - before;
    }
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().expect("sender");
    assert!(sent >= 10, "{sent} commands sent");
    assert!(
        answered_during_reloads > 0,
        "commands were answered while reloads ran"
    );
    assert_eq!(load.join().expect("load"), BTreeMap::from([(200, 30)]));
    let k = keyed.join().expect("keyed");
    assert_eq!(k.values().sum::<usize>(), 30, "{k:?}");
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );
    assert!(!ts.diags().contains("FATAL"));
    assert!(
        origin.max_in_flight() <= 4 + 2,
        "max {}",
        origin.max_in_flight()
    );
    // Still answering after it all.
    assert!(ctl(&ts, "show ctl4").contains("\"ok\":true"));
}
