//! rate_limit.so `--key=ip` with IPv6 clients against a real traffic_server:
//! aggregation by `--key-prefix` (default /64), on a rule traffic_server
//! serves on [::1].
//!
//! A loopback has one IPv6 address (::1), so two clients in one /64 cannot
//! both connect directly (binding other addresses would need the machine's
//! routes changed). The addresses to aggregate come instead from a trusted
//! proxy's `X-Forwarded-For`: the forwarded client goes through the same
//! prefix aggregation as a peer address. The proxy is ::1 itself, connected
//! to traffic_server's [::1] listener, so the trusted-proxy match and the
//! peer address are IPv6 too. Where the machine has no IPv6 loopback (a
//! container without IPv6), the same checks run with an IPv4 proxy.

use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};

const BASE: &str = "--rate=0.01 --burst=1 --queue=0 --key=ip";

/// Two clients in one /64, one in another /64 of the same /48.
const A: &str = "2001:db8:1:1::1";
const A2: &str = "2001:db8:1:1:ffff::2";
const B: &str = "2001:db8:1:2::1";

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, &format!("{BASE} {params}"))
}

fn has_ipv6_loopback() -> bool {
    TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// One request through the proxy, for the forwarded client `xff`.
fn forwarded(proxy: &mut Conn, host: &str, xff: &str) -> u16 {
    proxy
        .get(host, "/", &[("X-Forwarded-For", xff)])
        .expect("request")
        .status
}

#[test]
fn ipv6_clients_share_a_key_per_prefix() {
    let v6 = has_ipv6_loopback();
    if !v6 {
        eprintln!("no IPv6 loopback here: the proxy is 127.0.0.2, not ::1");
    }
    let proxy_ip = if v6 { "::1" } else { "127.0.0.2" };
    let trusted = format!("--trusted-proxies={proxy_ip}");
    let origin = Origin::start();
    let remap = [
        rule("p64.test", &origin, &trusted),
        rule(
            "p128.test",
            &origin,
            &format!("{trusted} --key-prefix=32/128"),
        ),
        rule(
            "p48.test",
            &origin,
            &format!("{trusted} --key-prefix=32/48"),
        ),
        rule("peer.test", &origin, ""),
    ]
    .concat();
    let mut b = TrafficServer::builder().remap(remap);
    if v6 {
        b = b.ipv6();
    }
    let ts = b.start().expect("start");
    let mut proxy = if v6 {
        Conn::open_ipv6(ts.port())
    } else {
        Conn::open_from(ts.port(), Ipv4Addr::new(127, 0, 0, 2))
    }
    .expect("connect");

    // Default /64: A and A2 are one client, B another.
    assert_eq!(forwarded(&mut proxy, "p64.test", A), 200);
    assert_eq!(forwarded(&mut proxy, "p64.test", A2), 429, "same /64 as A");
    assert_eq!(forwarded(&mut proxy, "p64.test", B), 200, "another /64");
    // A spoofed left-most entry changes nothing: B's /64 is still the key.
    let spoofed = format!("2001:db8:6::6, {B}");
    assert_eq!(forwarded(&mut proxy, "p64.test", &spoofed), 429);

    // /128: every address is its own client.
    assert_eq!(forwarded(&mut proxy, "p128.test", A), 200);
    assert_eq!(forwarded(&mut proxy, "p128.test", A2), 200, "own /128");
    assert_eq!(forwarded(&mut proxy, "p128.test", A), 429);

    // /48: A and B are one client; IPv4 clients keep their /32.
    assert_eq!(forwarded(&mut proxy, "p48.test", A), 200);
    assert_eq!(forwarded(&mut proxy, "p48.test", B), 429, "same /48 as A");
    assert_eq!(forwarded(&mut proxy, "p48.test", "198.51.100.1"), 200);

    if v6 {
        // A direct IPv6 peer is keyed by its own /64, apart from IPv4 peers.
        let mut peer = Conn::open_ipv6(ts.port()).expect("connect");
        let mut status = || peer.get("peer.test", "/", &[]).expect("request").status;
        assert_eq!((status(), status()), (200, 429), "::1 is limited");
        let mut v4 = Conn::open_from(ts.port(), Ipv4Addr::new(127, 0, 0, 3)).expect("connect");
        assert_eq!(v4.get("peer.test", "/", &[]).expect("request").status, 200);
    }
    assert_eq!(origin.count(), if v6 { 8 } else { 6 });
}
