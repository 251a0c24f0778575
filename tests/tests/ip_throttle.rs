//! ip_throttle.so against a real traffic_server: Perlbal's state machine
//! on a timeline (measured delays, the ban, its end; throttled, probation
//! and allowed again through idle time), max_concurrent (503) not counting
//! requests at the origin, a client dropping during its delay, allow and
//! deny lists (IPv4 and IPv6) with both actions and both defaults, path and
//! method scopes from a --config file, each event's log line, --log-only,
//! and refused options.
//!
//! Clients bind distinct loopback sources (127.0.0.2, .3, …): each test
//! uses its own addresses and rules, so the tests can run in parallel.

use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
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

/// Sleeps until `at` (bounded: never more than 10 s).
fn sleep_until(at: Instant) {
    thread::sleep(
        at.saturating_duration_since(Instant::now())
            .min(Duration::from_secs(10)),
    );
}

/// The idle transitions, with the values: an IP returns from
/// throttled to probation after `delay` seconds without a request (counted
/// from the end of its last delay), and from probation to allowed after
/// `threshold` (1 s). Each arrival time is chosen from when the previous
/// request was sent, so a late ATS timer can only move it later inside the
/// window being shown, never past it.
#[test]
fn timeline_idle_time_returns_throttled_to_probation_then_allowed() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "i.test",
            &origin,
            &format!("{SMALL} --max-concurrent=5"),
        ))
        .start()
        .expect("start");
    let me = ip(12);
    // allowed -> probation.
    delayed_by(&get(&ts, me, "i.test"), 0.0);
    // 1.5 s idle > threshold: allowed again, so not delayed (probation
    // would have delayed it by 1 s).
    thread::sleep(Duration::from_millis(1500));
    delayed_by(&get(&ts, me, "i.test"), 0.0);
    // Now throttled: 1 s, then 2 s (violations 1).
    delayed_by(&get(&ts, me, "i.test"), 1.0);
    let sent = Instant::now();
    let r = get(&ts, me, "i.test");
    assert_eq!(r.status, 200);
    delayed_by(&r, 2.0);
    // Its delay ended at sent + 2 s (or a little later). 2.5 s after that
    // the IP is in probation (idle > delay 2 s, < delay + threshold 3 s):
    // the next request starts throttling afresh at initial_delay (1 s);
    // still throttled it would have been 4 s, allowed 0 s.
    let late = r.elapsed.as_secs_f64() - 2.0;
    assert!(
        late < 0.45,
        "the delay ended {late:.3} s late; the window is 0.5 s"
    );
    sleep_until(sent + Duration::from_millis(4500));
    let sent = Instant::now();
    let r = get(&ts, me, "i.test");
    assert_eq!(r.status, 200);
    delayed_by(&r, 1.0);
    // 1 s (delay) + 1 s (threshold) idle after that delay: allowed, not delayed.
    assert!(r.elapsed.as_secs_f64() < 1.45, "late by {:?}", r.elapsed);
    sleep_until(sent + Duration::from_millis(3500));
    let r = get(&ts, me, "i.test");
    assert_eq!(r.status, 200);
    delayed_by(&r, 0.0);
    assert_eq!(origin.count(), 6);
    // Both throttling runs started at violations 0 with the initial delay.
    waits_for_log(
        &ts,
        &["event=throttled ip=127.0.0.12 rule=http.i.test state=throttled delay=2.000 violations=1"],
    );
    let fresh =
        "event=throttled ip=127.0.0.12 rule=http.i.test state=throttled delay=1.000 violations=0";
    let log = ts.log("ip_throttle.log");
    assert_eq!(log.matches(fresh).count(), 2, "{log}");
    assert!(
        !log.contains("ip=127.0.0.12 rule=http.i.test state=throttled delay=4.000"),
        "{log}"
    );
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

/// Requests already passed to the origin do not count toward
/// --max-concurrent: with max 1, two requests of the IP sit at a slow
/// origin while a third arrives; it is delayed (not refused 503).
#[test]
fn requests_at_the_origin_do_not_count_toward_max_concurrent() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "co.test",
            &origin,
            "--initial-delay=1 --max-delay=2 --threshold=10 --max-concurrent=1",
        ))
        .start()
        .expect("start");
    let me = ip(13);
    let port = ts.port();
    let slow = |path: &'static str| {
        thread::spawn(move || {
            let mut c = Conn::open_from(port, me)?;
            c.get("co.test", path, &[("X-Origin-Delay", "4000")])
        })
    };
    // Passes at once (probation), then held 4 s at the origin.
    let first = slow("/slow1");
    thread::sleep(Duration::from_millis(200));
    // Delayed 1 s (throttled), then held 4 s at the origin.
    let second = slow("/slow2");
    let deadline = Instant::now() + Duration::from_secs(3);
    while origin.in_flight() < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(origin.in_flight(), 2, "both slow requests at the origin");
    let r = get(&ts, me, "co.test");
    assert_eq!(r.status, 200, "refused: {}", r.reason);
    delayed_by(&r, 2.0);
    for (name, h) in [("first", first), ("second", second)] {
        let r = h.join().expect("thread").expect(name);
        assert_eq!(r.status, 200, "{name}");
    }
    assert_eq!(origin.count(), 3);
    assert!(!ts.log("ip_throttle.log").contains("event=concurrent"));
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
        .config_file("deny.txt", "127.0.0.0/28\n127.0.0.32/27\n127.0.0.33\n")
        .remap(remap)
        .start()
        .expect("start");
    // l.test: default throttle, deny-action deny.
    for _ in 0..4 {
        let r = get(&ts, ip(6), "l.test"); // allow-listed inside a denied /28
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
        let r = get(&ts, ip(33), "l.test"); // allowed (/31) beats any deny (/27, /32)
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

fn has_ipv6_loopback() -> bool {
    TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// An IPv6 client (::1, traffic_server listening on [::1] too) against
/// IPv6 CIDRs: denied by `::/64`; allowed by `::/120` although the deny
/// list holds `::/64` and `::1` itself; on neither list, throttled (its
/// second request is delayed).
#[test]
fn ipv6_allow_and_deny_lists() {
    if !has_ipv6_loopback() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let origin = Origin::start();
    let throttle = "--initial-delay=0.5 --threshold=10";
    let remap = rule(
        "d6.test",
        &origin,
        &format!("{throttle} --deny-file=deny6.txt"),
    ) + &rule(
        "a6.test",
        &origin,
        &format!("{throttle} --allow-file=allow6.txt --deny-file=deny6b.txt"),
    ) + &rule("n6.test", &origin, throttle);
    let ts = TrafficServer::builder()
        .ipv6()
        .config_file("deny6.txt", "2001:db8::/32\n::/64\n")
        .config_file("deny6b.txt", "::/64\n::1\n")
        .config_file("allow6.txt", "::/120 # loopback and neighbours\n")
        .remap(remap)
        .start()
        .expect("start");
    let get6 = |host: &str| {
        let mut c = Conn::open_ipv6(ts.port()).expect("connect [::1]");
        c.get(host, "/", &[]).expect("response")
    };
    assert_eq!(get6("d6.test").status, 403);
    for _ in 0..3 {
        let r = get6("a6.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    delayed_by(&get6("n6.test"), 0.0);
    delayed_by(&get6("n6.test"), 0.5);
    // IPv4 clients are not on the IPv6 lists.
    assert_eq!(get(&ts, ip(14), "d6.test").status, 200);
    waits_for_log(
        &ts,
        &[
            "event=blacklisted ip=::1 rule=http.d6.test",
            "event=whitelisted ip=::1 rule=http.a6.test",
            "event=throttled ip=::1 rule=http.n6.test state=throttled delay=0.500",
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

/// "Anchored as written": a path regex without `^` matches anywhere in
/// the path.
#[test]
fn a_path_regex_without_an_anchor_matches_mid_path() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "m.test",
            &origin,
            "--initial-delay=0.5 --threshold=10 --path-regex=app/",
        ))
        .start()
        .expect("start");
    for _ in 0..3 {
        delayed_by(&req(&ts, ip(16), "GET", "m.test", "/static/x"), 0.0);
    }
    delayed_by(&req(&ts, ip(15), "GET", "m.test", "/static/app/x"), 0.0);
    let r = req(&ts, ip(15), "GET", "m.test", "/static/app/y");
    assert_eq!(r.status, 200);
    delayed_by(&r, 0.5);
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
