//! ip_throttle.so behind a load balancer, against a real traffic_server:
//! with `--trusted-proxies` the client is the right-most forwarded address
//! that is not a trusted proxy, so an abusive client is delayed and banned,
//! not the balancer (and everyone behind it); the deny list applies to the
//! real client; a client's own left-most entries change nothing. And the
//! source of a PROXY protocol header (a `:pp` port) is the client.
//!
//! The "balancer" is this test connecting from its own loopback source;
//! the clients behind it are documentation addresses (192.0.2.0/24).

// Shared with ip_throttle.rs and ip_throttle_scope.rs; not every helper is used here.
#[allow(dead_code)]
mod ip_throttle_common;

use std::net::Ipv4Addr;
use std::thread;

use ats_tests::client::{Conn, Response};
use ats_tests::{Origin, TrafficServer};
use ip_throttle_common::{delayed_by, get, ip, rule, waits_for_log};

/// The 5th request in a row is the ban (violation 3 > 2); see [`escalate`].
const FAST: &str = "--initial-delay=1 --max-delay=2 --threshold=5 --ban-threshold=2 \
                    --ban-expiration=60 --max-concurrent=5 --deny-file=deny.txt";

/// An IP's escalation to a ban under [`FAST`]: request 0 passes
/// (probation), then 1 to 4 go at once: three are delayed (violations 0, 1,
/// 2), the last to arrive is the ban. Sent together, each reaches the
/// plugin well within the 2 s (twice the first delay) that keep the IP
/// throttled, however slow the machine; sent one after another with 0.1 s
/// delays, each had what was left of 0.1 s after the previous response.
/// Statuses: request 0's, then the others' sorted.
fn escalate(send: impl Fn(usize) -> u16 + Sync) -> Vec<u16> {
    let mut out = vec![send(0)];
    let send = &send;
    let mut rest: Vec<u16> = thread::scope(|s| {
        let at_once: Vec<_> = (1..5).map(|i| s.spawn(move || send(i))).collect();
        at_once
            .into_iter()
            .map(|h| h.join().expect("request"))
            .collect()
    });
    rest.sort_unstable();
    out.extend(rest);
    out
}

fn client(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, last)
}

/// One request from `src` with these header fields, on a fresh connection.
fn via(ts: &TrafficServer, src: Ipv4Addr, host: &str, fields: &[(&str, &str)]) -> Response {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    c.request("GET", host, "/", fields).expect("response")
}

/// One request on a fresh connection from `src` whose PROXY header names
/// `client`.
fn proxied(ts: &TrafficServer, src: Ipv4Addr, client: Ipv4Addr, fields: &[(&str, &str)]) -> u16 {
    let mut c = Conn::open_proxied(ts.port(), src, client).expect("connect");
    c.request("GET", "p.test", "/", fields)
        .expect("response")
        .status
}

#[test]
fn behind_a_trusted_proxy_the_abuser_is_banned_and_the_others_are_not() {
    let origin = Origin::start();
    let balancer = ip(9);
    let remap = rule(
        "x.test",
        &origin,
        &format!("{FAST} --trusted-proxies=127.0.0.9,10.0.0.0/8"),
    ) + &rule(
        "f.test",
        &origin,
        &format!("{FAST} --trusted-proxies=127.0.0.9 --forwarded-header=Forwarded"),
    );
    let ts = TrafficServer::builder()
        .config_file("deny.txt", "192.0.2.66\n")
        .remap(remap)
        .start()
        .expect("start");
    let abuser = [("X-Forwarded-For", "192.0.2.10")];
    // The balancer forwards the abuser's requests: passed, delayed,
    // delayed, delayed, banned.
    let statuses = escalate(|_| via(&ts, balancer, "x.test", &abuser).status);
    assert_eq!(statuses, [200, 200, 200, 200, 403]);
    // Another client behind the same balancer is not affected.
    let r = via(
        &ts,
        balancer,
        "x.test",
        &[("X-Forwarded-For", "192.0.2.20")],
    );
    assert_eq!(r.status, 200);
    delayed_by(&r, 0.0);
    // The abuser writes the other client's address first: the balancer
    // appends the real one, which is what counts.
    let spoofed = [("X-Forwarded-For", "192.0.2.20, 192.0.2.10")];
    assert_eq!(via(&ts, balancer, "x.test", &spoofed).status, 403);
    // The other client naming the abuser first is still itself (its second
    // request: in probation, so delayed, not refused).
    let innocent = [("X-Forwarded-For", "192.0.2.10, 192.0.2.20")];
    assert_eq!(via(&ts, balancer, "x.test", &innocent).status, 200);
    // Through two trusted proxies, the client is still found.
    let chained = [("X-Forwarded-For", "192.0.2.10, 10.1.2.3")];
    assert_eq!(via(&ts, balancer, "x.test", &chained).status, 403);
    // The balancer itself is not banned, and an untrusted peer's header is
    // never read: it is its own client.
    assert_eq!(get(&ts, balancer, "x.test").status, 200);
    assert_eq!(via(&ts, ip(8), "x.test", &abuser).status, 200);
    // The deny list applies to the client behind the balancer.
    let denied = [("X-Forwarded-For", "192.0.2.66")];
    assert_eq!(via(&ts, balancer, "x.test", &denied).status, 403);
    // --forwarded-header=Forwarded reads RFC 7239's header, and only it.
    let rfc = [("Forwarded", "for=\"192.0.2.66:4711\";proto=http")];
    assert_eq!(via(&ts, balancer, "f.test", &rfc).status, 403);
    assert_eq!(via(&ts, balancer, "f.test", &denied).status, 200);
    waits_for_log(
        &ts,
        &[
            "event=ban ip=192.0.2.10 rule=http.x.test state=banned",
            "event=banned ip=192.0.2.10 rule=http.x.test state=banned",
            "event=blacklisted ip=192.0.2.66 rule=http.x.test",
            "event=blacklisted ip=192.0.2.66 rule=http.f.test",
        ],
    );
    // Nothing happened to the balancer, nor was the other client banned.
    let log = ts.log("ip_throttle.log");
    assert!(!log.contains("ip=127.0.0.9 "), "{log}");
    assert!(
        !log.contains("ip=192.0.2.20 rule=http.x.test state=banned"),
        "{log}"
    );
}

/// On a `:pp` port the PROXY header's source is the client, on 9.2 (where
/// ATS reports it as the client address) and on 10.x (where it does only
/// with `pp-clnt`, so the plugin reads the header's source itself).
#[test]
fn the_proxy_protocol_source_is_the_client() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .proxy_protocol()
        .config_file("deny.txt", "192.0.2.66\n")
        .remap(rule(
            "p.test",
            &origin,
            &format!("{FAST} --trusted-proxies=192.0.2.40"),
        ))
        .start()
        .expect("start");
    let balancer = ip(9);
    let statuses = escalate(|_| proxied(&ts, balancer, client(30), &[]));
    assert_eq!(statuses, [200, 200, 200, 200, 403]);
    assert_eq!(proxied(&ts, balancer, client(31), &[]), 200);
    assert_eq!(proxied(&ts, balancer, client(66), &[]), 403);
    // A PROXY source that is a trusted proxy has its forwarding header read.
    let behind = |c| [("X-Forwarded-For", c)];
    assert_eq!(
        proxied(&ts, balancer, client(40), &behind("192.0.2.30")),
        403
    );
    assert_eq!(
        proxied(&ts, balancer, client(40), &behind("192.0.2.32")),
        200
    );
    waits_for_log(
        &ts,
        &[
            "event=ban ip=192.0.2.30 rule=http.p.test state=banned",
            "event=blacklisted ip=192.0.2.66 rule=http.p.test",
        ],
    );
    assert!(!ts.log("ip_throttle.log").contains("ip=127.0.0.9 "));
}

/// A client the trusted balancers do not name (`unknown`, `_hidden`, no
/// header) is never the balancer: not allow-listed with the balancers'
/// network, and one state for all such clients, apart from the balancer's
/// own address, logged and shown as `unknown`.
#[test]
fn an_unknown_client_behind_a_trusted_proxy_is_neither_listed_nor_the_proxy() {
    let origin = Origin::start();
    let trusted = "--trusted-proxies=127.0.0.9,127.0.0.10";
    let remap = rule(
        "allowed.test",
        &origin,
        &format!("{FAST} {trusted} --allow-file=allow.txt"),
    ) + &rule("plain.test", &origin, &format!("{FAST} {trusted}"));
    let ts = TrafficServer::builder()
        .config_file("deny.txt", "192.0.2.66\n")
        // The balancers' network is allowed, as an operator might.
        .config_file("allow.txt", "127.0.0.0/8\n")
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    let (lb1, lb2) = (ip(9), ip(10));
    // Unnamed clients through either balancer: one client, escalated and
    // banned together, on each rule.
    let unnamed: [(Ipv4Addr, &[(&str, &str)]); 5] = [
        (lb1, &[("X-Forwarded-For", "unknown")]),
        (lb2, &[("X-Forwarded-For", "_hidden")]),
        (lb1, &[]),
        (lb2, &[("X-Forwarded-For", "unknown")]),
        (lb1, &[("X-Forwarded-For", "192.0.2.10, _obf")]),
    ];
    for host in ["allowed.test", "plain.test"] {
        let statuses = escalate(|i| via(&ts, unnamed[i].0, host, unnamed[i].1).status);
        assert_eq!(statuses, [200, 200, 200, 200, 403], "{host}");
        // Not the balancer's state: its own address (an all-trusted chain)
        // is not banned, nor is a client it names.
        let own = [("X-Forwarded-For", "127.0.0.9")];
        assert_eq!(via(&ts, lb1, host, &own).status, 200, "{host}");
        let named = [("X-Forwarded-For", "192.0.2.10")];
        assert_eq!(via(&ts, lb2, host, &named).status, 200, "{host}");
    }
    waits_for_log(
        &ts,
        &[
            "event=throttled ip=unknown rule=http.plain.test",
            "event=ban ip=unknown rule=http.allowed.test state=banned",
            "event=ban ip=unknown rule=http.plain.test state=banned",
            "event=whitelisted ip=127.0.0.9 rule=http.allowed.test",
        ],
    );
    let log = ts.log("ip_throttle.log");
    assert!(!log.contains("ip=127.0.0.9 rule=http.plain.test"), "{log}");
    assert!(!log.contains("ip=127.0.0.10 "), "{log}");
    // The management commands name it too.
    let shown = ts.plugin_msg("ip_throttle", "show unknown http.plain.test");
    for field in [
        "\"ip\":\"unknown\"",
        "\"state\":\"banned\"",
        "\"listed\":\"neither\"",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    let lifted = ts.plugin_msg("ip_throttle", "unban unknown http.plain.test");
    assert!(
        lifted.contains("\"unbanned\":[\"http.plain.test\"]"),
        "{lifted}"
    );
    assert_eq!(via(&ts, lb2, "plain.test", &[]).status, 200);
    assert_eq!(via(&ts, lb2, "allowed.test", &[]).status, 403);
}
