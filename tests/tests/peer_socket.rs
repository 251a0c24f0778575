//! rate_limit.so's one peer socket against real traffic_servers on loopback:
//! who may send (`--peer-allow` with a multicast group), several groups on
//! one socket, rules that disagree on the socket, and the metrics of what a
//! report leaves out (`--peer-max-tags`) and of senders over the sender
//! table (`--peer-max-senders`).
//!
//! The multicast rules use `--peer-period=60000` and the datagrams come
//! from this test (sent unicast to 127.0.0.1): the servers never send a
//! report while the test runs, and the group is joined on loopback
//! (`--peer-interface=127.0.0.1`), so nothing leaves the host.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};

const SECRET: &str = "integration-test-secret-0123456789";

fn udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
    s.local_addr().expect("addr").port()
}

fn status(c: &mut Conn, host: &str, client: &str) -> u16 {
    c.get(host, "/", &[("X-Client", client)])
        .map(|r| r.status)
        .unwrap_or(0)
}

/// `rules`: `(host, extra options)`, each a keyed rate limit on `X-Client`.
/// With `manager`, metrics can be read (traffic_ctl).
fn start(
    origin: &Origin,
    rules: &[(&str, String)],
    manager: bool,
) -> Result<TrafficServer, String> {
    let mut b = TrafficServer::builder().config_file("peer.secret", &format!("{SECRET}\n"));
    if manager {
        b = b.with_manager();
    }
    // One remap.config: the builder's remap() sets the whole file.
    let mut remap = String::new();
    for (host, extra) in rules {
        let params = format!(
            "--key=header:X-Client --queue=0 --rate=0.01 --burst=3 --peer-secret-file=peer.secret {extra}"
        );
        remap += &ats_tests::rule("rate_limit", host, origin, &params);
    }
    b = b.remap(remap);
    b.start().map_err(|e| e.diags)
}

/// One authentic report from sender `id` (its own sequence numbers).
fn report(id: u64, seq: &mut u64, group: &str, tag: &str, hits: u32) -> Vec<Vec<u8>> {
    let key = peer::Key::new(SECRET.as_bytes()).expect("key");
    let entries = vec![(Box::from(tag.as_bytes()), hits)];
    peer::wire::encode(&key, id, seq, peer::unix_ms(), group.as_bytes(), &entries)
}

fn send(from: &UdpSocket, to: SocketAddr, dgs: &[Vec<u8>]) {
    for dg in dgs {
        from.send_to(dg, to).expect("send");
    }
}

/// With `--peer-group`, `--peer-allow` says who may send: an authentic
/// report from 127.0.0.2 is dropped and counted, the same from 127.0.0.1
/// is applied.
#[test]
fn with_a_multicast_group_only_allowed_senders_are_heard() {
    let origin = Origin::start();
    let port = udp_port();
    let ts = start(
        &origin,
        &[(
            "m.test",
            format!(
                "--group=g --peer-group=239.255.77.1:{port} --peer-interface=127.0.0.1 --peer-listen=127.0.0.1:{port} \
                 --peer-allow=127.0.0.1/32 --peer-period=60000"
            ),
        )],
        true,
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let to: SocketAddr = ([127, 0, 0, 1], port).into();
    let stranger = UdpSocket::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let friend = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let (mut s1, mut s2) = (0, 0);
    send(&stranger, to, &report(71, &mut s1, "g", "c1", 100));
    send(&friend, to, &report(72, &mut s2, "g", "c2", 100));
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_rejected", 1),
        Ok(1)
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_hits_applied", 100),
        Ok(100)
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_reports_received", 1),
        Ok(1)
    );
    let mut c = Conn::open(ts.port()).expect("connect");
    assert_eq!(status(&mut c, "m.test", "c1"), 200, "127.0.0.2 drained c1");
    assert_eq!(
        status(&mut c, "m.test", "c2"),
        429,
        "127.0.0.1's report applies"
    );
}

/// Two rules of different groups share the process's socket: a report
/// applies to its own group's limiter only, and one for a group no rule has
/// is ignored (not counted as received).
#[test]
fn groups_share_one_socket_and_a_report_reaches_its_own_group_only() {
    let origin = Origin::start();
    let (listen, me) = (udp_port(), UdpSocket::bind("127.0.0.1:0").expect("udp"));
    let mine = me.local_addr().expect("addr").port();
    let socket =
        format!("--peers=127.0.0.1:{mine} --peer-listen=127.0.0.1:{listen} --peer-period=60000");
    let ts = start(
        &origin,
        &[
            ("a.test", format!("--group=g1 {socket}")),
            ("b.test", format!("--group=g2 {socket}")),
        ],
        true,
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let to: SocketAddr = ([127, 0, 0, 1], listen).into();
    let mut seq = 0;
    send(&me, to, &report(81, &mut seq, "g1", "c1", 100));
    send(&me, to, &report(81, &mut seq, "g3", "c2", 100));
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_reports_received", 1),
        Ok(1),
        "{}",
        ts.diags()
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_hits_applied", 100),
        Ok(100)
    );
    assert_eq!(ts.metric("plugin.rate_limiter.peer_rejected"), Some(0));
    let mut c = Conn::open(ts.port()).expect("connect");
    assert_eq!(
        status(&mut c, "a.test", "c1"),
        429,
        "g1's report drains g1's c1"
    );
    assert_eq!(
        status(&mut c, "b.test", "c1"),
        200,
        "g2 shares the socket, not g1's buckets"
    );
    assert_eq!(
        status(&mut c, "a.test", "c2"),
        200,
        "a report for g3 is ignored"
    );
    assert_eq!(
        status(&mut c, "b.test", "c2"),
        200,
        "a report for g3 is ignored"
    );
}

/// One socket per process: a second peered rule naming another
/// `--peer-listen` fails, saying which option differs and why.
#[test]
fn a_rule_that_disagrees_on_the_socket_is_refused_naming_the_option() {
    let origin = Origin::start();
    let (a, b, peer) = (udp_port(), udp_port(), udp_port());
    let err = start(
        &origin,
        &[
            (
                "a.test",
                format!("--group=g1 --peers=127.0.0.1:{peer} --peer-listen=127.0.0.1:{a}"),
            ),
            (
                "b.test",
                format!("--group=g2 --peers=127.0.0.1:{peer} --peer-listen=127.0.0.1:{b}"),
            ),
        ],
        false,
    )
    .err()
    .expect("the second rule must fail");
    let want = format!(
        "--peer-listen=127.0.0.1:{b} differs from --peer-listen=127.0.0.1:{a} of the running peer exchange"
    );
    assert!(err.contains(&want), "{err}");
}

/// With `--peer-max-tags=1` a report carries one client key; the others
/// served in that period are counted in `peer_tags_dropped`.
#[test]
fn tags_left_out_of_a_report_are_counted() {
    let origin = Origin::start();
    let (listen, me) = (udp_port(), UdpSocket::bind("127.0.0.1:0").expect("udp"));
    let mine = me.local_addr().expect("addr").port();
    let ts = start(
        &origin,
        &[(
            "d.test",
            format!(
                "--group=g --peers=127.0.0.1:{mine} --peer-listen=127.0.0.1:{listen} \
                 --peer-period=1000 --peer-max-tags=1"
            ),
        )],
        true,
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let mut c = Conn::open(ts.port()).expect("connect");
    // One request each: four (tag, period) pairs, however the periods fall.
    for client in ["c1", "c2", "c3", "c4"] {
        assert_eq!(status(&mut c, "d.test", client), 200);
    }
    // Every report of this rule carries one tag; a period with k tags drops
    // k − 1, so the dropped count is 4 minus the entries received.
    let key = peer::Key::new(SECRET.as_bytes()).expect("key");
    me.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let mut entries = Vec::new();
    let end = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < end {
        if let Ok((n, _)) = me.recv_from(&mut buf) {
            let dg = peer::wire::open(&key, &buf[..n]).expect("authentic");
            assert_eq!(dg.entries.len(), 1, "{dg:?}");
            entries.extend(dg.entries);
        }
    }
    assert!(!entries.is_empty() && entries.len() < 4, "{entries:?}");
    let dropped = 4 - entries.len() as i64;
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_tags_dropped", dropped),
        Ok(dropped)
    );
    assert_eq!(ts.metric("plugin.rate_limiter.peer_send_errors"), Some(0));
}

/// With `--peer-max-senders=1`, a second sender's authentic report is
/// dropped while the first is tracked, and counted in `peer_senders_dropped`
/// (and `peer_rejected`); the first sender is still heard.
#[test]
fn senders_beyond_the_table_are_dropped_and_counted() {
    let origin = Origin::start();
    let (listen, me) = (udp_port(), UdpSocket::bind("127.0.0.1:0").expect("udp"));
    let mine = me.local_addr().expect("addr").port();
    let ts = start(
        &origin,
        &[(
            "s.test",
            format!(
                "--group=g --peers=127.0.0.1:{mine} --peer-listen=127.0.0.1:{listen} \
                 --peer-period=60000 --peer-max-senders=1"
            ),
        )],
        true,
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let to: SocketAddr = ([127, 0, 0, 1], listen).into();
    let (mut s1, mut s2) = (0, 0);
    send(&me, to, &report(91, &mut s1, "g", "c1", 100));
    send(&me, to, &report(92, &mut s2, "g", "c2", 100));
    send(&me, to, &report(91, &mut s1, "g", "c3", 100));
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_senders_dropped", 1),
        Ok(1),
        "{}",
        ts.diags()
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_hits_applied", 200),
        Ok(200)
    );
    assert_eq!(ts.metric("plugin.rate_limiter.peer_rejected"), Some(1));
    let mut c = Conn::open(ts.port()).expect("connect");
    assert_eq!(status(&mut c, "s.test", "c2"), 200, "92 was not heard");
    assert_eq!(status(&mut c, "s.test", "c3"), 429, "91 still is");
}
