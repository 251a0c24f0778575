//! ip_throttle.so against a real traffic_server: Perlbal's state machine
//! on a timeline (measured delays, the ban, its end), max_concurrent (503),
//! a client dropping during its delay, allow and deny lists with both
//! actions and both defaults, path and method scopes from a --config file,
//! each event's log line, --log-only, and refused options.
//!
//! Clients bind distinct loopback sources (127.0.0.2, .3, …): each test
//! uses its own addresses and rules, so the tests can run in parallel.

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{Conn, GiveUp, Response};
use ats_tests::{Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("ip_throttle", host, origin, params)
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// One request from `src` on a fresh connection.
fn req(ts: &TrafficServer, src: Ipv4Addr, method: &str, host: &str, path: &str) -> Response {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    c.request(method, host, path, &[]).expect("response")
}

fn get(ts: &TrafficServer, src: Ipv4Addr, host: &str) -> Response {
    req(ts, src, "GET", host, "/")
}

/// Asserts a response came after about `secs` seconds of delay (ATS
/// timers fire late by up to a few hundred ms on a loaded 2-core CI box).
fn delayed_by(r: &Response, secs: f64) {
    let got = r.elapsed.as_secs_f64();
    assert!(
        got >= secs - 0.05 && got < secs + 0.9,
        "expected a delay of {secs} s, measured {got:.3} s (status {})",
        r.status
    );
}

fn waits_for_log(ts: &TrafficServer, what: &[&str]) {
    let ok = ts.wait_for_log("ip_throttle.log", Duration::from_secs(10), |t| {
        what.iter().all(|w| t.contains(w))
    });
    assert!(
        ok,
        "ip_throttle.log lacks {what:?}:\n{}",
        ts.log("ip_throttle.log")
    );
}

const SMALL: &str =
    "--initial-delay=1 --max-delay=4 --threshold=1 --ban-threshold=3 --ban-expiration=3";

#[test]
fn timeline_delays_double_then_ban_then_allowed_again() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "t.test",
            &origin,
            &format!("{SMALL} --max-concurrent=5"),
        ))
        .start()
        .expect("start");
    let me = ip(2);
    // allowed -> probation: at once; then throttled: 1, 2, 4, 4 s.
    for want in [0.0, 1.0, 2.0, 4.0, 4.0] {
        let r = get(&ts, me, "t.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, want);
    }
    // Violation 4 > ban_threshold 3: banned (403), and 403 while banned.
    let banned_at = Instant::now();
    let r = get(&ts, me, "t.test");
    assert_eq!(r.status, 403);
    assert!(r.elapsed < Duration::from_millis(300));
    assert_eq!(get(&ts, me, "t.test").status, 403);
    // Another client is not affected.
    let other = get(&ts, ip(3), "t.test");
    assert_eq!(other.status, 200);
    delayed_by(&other, 0.0);
    assert_eq!(origin.count(), 6);
    // The ban expires after 3 s: the unban is logged on time, then allowed.
    waits_for_log(
        &ts,
        &["event=unban ip=127.0.0.2 rule=http.t.test state=allowed delay=0.000 violations=0"],
    );
    assert!(banned_at.elapsed() >= Duration::from_millis(2900));
    let r = get(&ts, me, "t.test");
    assert_eq!(r.status, 200);
    delayed_by(&r, 0.0);
    // Each event's line: time (ATS), event, IP, rule, state, delay, violations.
    waits_for_log(
        &ts,
        &[
            "event=throttled ip=127.0.0.2 rule=http.t.test state=throttled delay=1.000 violations=0",
            "event=throttled ip=127.0.0.2 rule=http.t.test state=throttled delay=2.000 violations=1",
            "event=throttled ip=127.0.0.2 rule=http.t.test state=throttled delay=4.000 violations=2",
            "event=throttled ip=127.0.0.2 rule=http.t.test state=throttled delay=4.000 violations=3",
            "event=ban ip=127.0.0.2 rule=http.t.test state=banned delay=4.000 violations=4",
            "event=banned ip=127.0.0.2 rule=http.t.test state=banned",
        ],
    );
    let log = ts.log("ip_throttle.log");
    let line = log
        .lines()
        .find(|l| l.contains("event=ban "))
        .unwrap_or_default();
    // ATS's timestamp comes first.
    assert!(
        line.split_whitespace()
            .next()
            .is_some_and(|t| t.chars().next().is_some_and(|c| c.is_ascii_digit())),
        "{line}"
    );
    assert_eq!(log.matches("event=unban").count(), 1, "{log}");
}

#[test]
fn max_concurrent_answers_503_too_many_connections() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "c.test",
            &origin,
            "--initial-delay=2 --threshold=10 --max-concurrent=1",
        ))
        .start()
        .expect("start");
    let me = ip(4);
    assert_eq!(get(&ts, me, "c.test").status, 200);
    let port = ts.port();
    let results = ats_tests::client::burst(3, move |i| {
        // Staggered so the first of the three is the one delayed.
        thread::sleep(Duration::from_millis(100 * i as u64));
        let mut c = Conn::open_from(port, me)?;
        c.get("c.test", &format!("/b{i}"), &[])
    });
    let r: Vec<&Response> = results
        .iter()
        .map(|r| r.as_ref().expect("response"))
        .collect();
    assert_eq!(r[0].status, 200);
    delayed_by(r[0], 2.0);
    for x in &r[1..] {
        assert_eq!((x.status, x.reason.as_str()), (503, "Too many connections"));
        assert!(x.elapsed < Duration::from_millis(500));
    }
    // Requests passed to the origin do not count: a slow one does not
    // stop the next delay.
    assert_eq!(origin.count(), 2);
    waits_for_log(
        &ts,
        &["event=concurrent ip=127.0.0.4 rule=http.c.test state=throttled"],
    );
}

#[test]
fn a_client_dropping_during_its_delay_never_reaches_the_origin_and_keeps_its_delay() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "d.test",
            &origin,
            "--initial-delay=1 --max-delay=8 --threshold=10 --max-concurrent=5",
        ))
        .start()
        .expect("start");
    let me = ip(5);
    assert_eq!(get(&ts, me, "d.test").status, 200);
    // Delayed by 1 s; gives up after 300 ms.
    let c = Conn::open_from(ts.port(), me).expect("connect");
    c.give_up_after(
        "d.test",
        "/gone",
        &[],
        Duration::from_millis(300),
        GiveUp::Reset,
    )
    .expect("send");
    thread::sleep(Duration::from_millis(1000));
    assert_eq!(origin.count(), 1, "the dropped request reached the origin");
    assert!(origin.requests().iter().all(|r| r.path != "/gone"));
    // Still throttled, delay unchanged (1 s): the next doubles it to 2 s.
    let r = get(&ts, me, "d.test");
    assert_eq!(r.status, 200);
    delayed_by(&r, 2.0);
    assert_eq!(origin.count(), 2);
}

#[test]
fn allow_and_deny_lists_with_both_actions_and_both_defaults() {
    let origin = Origin::start();
    let common = "--initial-delay=0.5 --threshold=10 --allow-file=allow.txt --deny-file=deny.txt";
    let remap = rule("l.test", &origin, common)
        + &rule(
            "lt.test",
            &origin,
            &format!("{common} --default-action=allow --deny-action=throttle"),
        );
    let ts = TrafficServer::builder()
        .config_file("allow.txt", "# trusted\n127.0.0.6\n127.0.0.32/31 # pair\n")
        .config_file("deny.txt", "127.0.0.0/28\n127.0.0.32/27\n")
        .remap(remap)
        .start()
        .expect("start");
    // l.test: default throttle, deny-action deny.
    for _ in 0..4 {
        let r = get(&ts, ip(6), "l.test"); // allow-listed inside a denied /28
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
        let r = get(&ts, ip(33), "l.test"); // /31 allowed beats /27 denied
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    assert_eq!(get(&ts, ip(7), "l.test").status, 403);
    assert_eq!(get(&ts, ip(40), "l.test").status, 403);
    let a = get(&ts, ip(20), "l.test"); // on neither list: throttled
    let b = get(&ts, ip(20), "l.test");
    delayed_by(&a, 0.0);
    delayed_by(&b, 0.5);
    // lt.test: default allow, deny-action throttle.
    for _ in 0..4 {
        let r = get(&ts, ip(21), "lt.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    let a = get(&ts, ip(8), "lt.test");
    let b = get(&ts, ip(8), "lt.test");
    assert_eq!((a.status, b.status), (200, 200));
    delayed_by(&a, 0.0);
    delayed_by(&b, 0.5);
    waits_for_log(
        &ts,
        &[
            "event=whitelisted ip=127.0.0.6 rule=http.l.test state=allowed",
            "event=blacklisted ip=127.0.0.7 rule=http.l.test state=allowed",
            "event=throttled ip=127.0.0.20 rule=http.l.test state=throttled delay=0.500",
            "event=blacklisted ip=127.0.0.8 rule=http.lt.test state=throttled delay=0.500",
        ],
    );
}

#[test]
fn path_and_method_scope_from_a_config_file() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file(
            "ip_throttle.conf",
            "# Perlbal-style scope\ninitial-delay = 0.5\nthreshold = 10\npath-regex = ^/app/\nmethod-regex = ^GET$\nlog-events = throttled\n",
        )
        .remap(rule("s.test", &origin, "--config=ip_throttle.conf"))
        .start()
        .expect("start");
    let me = ip(9);
    for _ in 0..3 {
        let r = req(&ts, me, "GET", "s.test", "/static/x");
        delayed_by(&r, 0.0);
        let r = req(&ts, me, "POST", "s.test", "/app/x");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    delayed_by(&req(&ts, me, "GET", "s.test", "/app/1"), 0.0);
    delayed_by(&req(&ts, me, "GET", "s.test", "/app/2"), 0.5);
    waits_for_log(&ts, &["event=throttled ip=127.0.0.9 rule=http.s.test"]);
    assert_eq!(ts.log("ip_throttle.log").matches("event=").count(), 1);
}

#[test]
fn log_only_delays_and_refuses_nothing_and_logs_everything() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("deny.txt", "127.0.0.10\n")
        .remap(rule(
            "o.test",
            &origin,
            &format!(
                "{SMALL} --ban-threshold=1 --max-concurrent=5 --deny-file=deny.txt --log-only"
            ),
        ))
        .start()
        .expect("start");
    for _ in 0..6 {
        let r = get(&ts, ip(11), "o.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    let r = get(&ts, ip(10), "o.test");
    assert_eq!(r.status, 200);
    assert_eq!(origin.count(), 7);
    waits_for_log(
        &ts,
        &[
            "event=throttled ip=127.0.0.11 rule=http.o.test state=throttled delay=1.000 violations=0 dry_run=1",
            "event=ban ip=127.0.0.11 rule=http.o.test state=banned delay=4.000 violations=2 dry_run=1",
            "event=banned ip=127.0.0.11",
            "event=blacklisted ip=127.0.0.10 rule=http.o.test state=allowed delay=0.000 violations=0 dry_run=1",
        ],
    );
}

/// Options, config files (name, text), and the message expected.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    &'static str,
);

#[test]
fn bad_options_and_list_lines_fail_the_rule_naming_them() {
    let origin = Origin::start();
    let cases: [Case; 3] = [
        (
            "--initial-delay=soon",
            vec![],
            "[ip_throttle] --initial-delay has an invalid value 'soon': allowed a number of seconds",
        ),
        (
            "--deny-file=deny.txt",
            vec![("deny.txt", "10.0.0.0/8\n10.0.0.0/40\n")],
            "deny.txt:2: '10.0.0.0/40' is not an IP address or CIDR",
        ),
        (
            "--config=t.conf",
            vec![("t.conf", "max-concurrent=many\n")],
            "[ip_throttle] --max-concurrent has an invalid value 'many' (at ",
        ),
    ];
    for (params, files, want) in cases {
        let mut b = TrafficServer::builder().remap(rule("bad.test", &origin, params));
        for (n, t) in &files {
            b = b.config_file(n, t);
        }
        let err = b
            .start()
            .err()
            .unwrap_or_else(|| panic!("{params} must fail the rule"));
        let line = err
            .diags
            .lines()
            .find(|l| l.contains("failed to create instance for plugin"))
            .unwrap_or_else(|| panic!("no refusal in diags.log: {err:?}"));
        assert!(line.contains(want), "{params}: {line}");
    }
}
