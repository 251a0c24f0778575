//! Helpers shared by ip_throttle.rs and ip_throttle_scope.rs: a rule,
//! requests from a chosen loopback source, delay and log assertions.

use std::net::Ipv4Addr;
use std::time::Duration;

use ats_tests::client::{Conn, Response};
use ats_tests::{Origin, TrafficServer};

pub fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("ip_throttle", host, origin, params)
}

pub fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// One request from `src` on a fresh connection.
pub fn req(ts: &TrafficServer, src: Ipv4Addr, method: &str, host: &str, path: &str) -> Response {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    c.request(method, host, path, &[]).expect("response")
}

pub fn get(ts: &TrafficServer, src: Ipv4Addr, host: &str) -> Response {
    req(ts, src, "GET", host, "/")
}

/// Asserts a response came after about `secs` seconds of delay (ATS
/// timers fire late by up to a few hundred ms on a loaded 2-core CI box,
/// and up to 0.1 s early as the client measures them: ATS counts from its
/// thread's clock as read before the poll that delivered the request, up to
/// 60 ms before, plus 1 ms `Timer::after` drops; see foundation.rs).
pub fn delayed_by(r: &Response, secs: f64) {
    let got = r.elapsed.as_secs_f64();
    assert!(
        got >= secs - 0.1 && got < secs + 0.9,
        "expected a delay of {secs} s, measured {got:.3} s (status {})",
        r.status
    );
}

pub fn waits_for_log(ts: &TrafficServer, what: &[&str]) {
    let ok = ts.wait_for_log("ip_throttle.log", Duration::from_secs(10), |t| {
        what.iter().all(|w| t.contains(w))
    });
    assert!(
        ok,
        "ip_throttle.log lacks {what:?}:\n{}",
        ts.log("ip_throttle.log")
    );
}

pub const SMALL: &str =
    "--initial-delay=1 --max-delay=4 --threshold=1 --ban-threshold=3 --ban-expiration=3";
