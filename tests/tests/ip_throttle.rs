//! ip_throttle.so against a real traffic_server: Perlbal's state machine
//! on a timeline (measured delays, the ban, its end; throttled, probation
//! and allowed again through idle time), max_concurrent (503) not counting
//! requests at the origin, and a client dropping during its delay. Lists,
//! scopes, --log-only and refused options: ip_throttle_scope.rs.
//!
//! Clients bind distinct loopback sources (127.0.0.2, .3, …): each test
//! uses its own addresses and rules, so the tests can run in parallel.

mod ip_throttle_common;

use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{Conn, GiveUp, Response};
use ats_tests::{Origin, TrafficServer};
use ip_throttle_common::{delayed_by, get, ip, rule, waits_for_log, SMALL};

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
