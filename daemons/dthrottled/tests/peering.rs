//! Two real daemons exchanging reports over UDP on 127.0.0.1.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{free_udp_port, pattern, Daemon, SECRET};

fn peer_config(burst: u32, rate: f64, period_ms: u64, me: u16, peers: &[u16]) -> String {
    let peers: Vec<String> = peers.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!(
        "burst = {burst}\nrate = {rate}\nperiod_ms = {period_ms}\npeer_listen = 127.0.0.1:{me}\npeers = {}\n",
        peers.join(",")
    )
}

/// The seed's worked example with faster timings: burst 10, rate 2/s,
/// reports every 300 ms. C's 17 requests split 9/8 are served, A refuses
/// the 19th; after the exchange both refuse (about −8 + elapsed·2 tokens),
/// and C is served again only once both have refilled past their debt.
#[test]
fn two_daemons_share_one_bucket_per_tag() {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    let a = Daemon::start("peer-a", &peer_config(10, 2.0, 300, pa, &[pb]));
    let b = Daemon::start("peer-b", &peer_config(10, 2.0, 300, pb, &[pa]));
    let (mut ca, mut cb) = (a.connect(), b.connect());
    let start = Instant::now();
    ca.send(b"C\n".repeat(9).as_slice());
    cb.send(b"C\n".repeat(8).as_slice());
    assert_eq!(ca.answers(9), pattern(9, 0));
    assert_eq!(cb.answers(8), pattern(8, 0));
    ca.send(b"C\nC\n");
    assert_eq!(ca.answers(2), pattern(1, 1), "A refuses the 19th");
    // B alone still has about 2 tokens; wait for the exchange.
    std::thread::sleep(Duration::from_millis(800));
    assert!(!ca.ask("C"), "A after the exchange");
    assert!(!cb.ask("C"), "B after the exchange");
    // Served again only after the debt is paid on both: (18 - 10)/2 s from
    // the burst at the earliest; locally alone B would serve at once.
    let deadline = start + Duration::from_secs(12);
    while !ca.ask("C") {
        assert!(Instant::now() < deadline, "A never served C again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(3500),
        "A served C again after only {waited:?}"
    );
    // Other tags were never affected.
    assert!(ca.ask("other") && cb.ask("other"));
}

/// A third socket listed as A's peer records A's report; it then replays it
/// to B, and sends B forgeries and garbage: B's bucket reflects A's report
/// exactly once.
#[test]
fn forged_replayed_and_garbage_datagrams_have_no_effect() {
    let sniffer = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    sniffer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("{e}"));
    let ps = sniffer.local_addr().map_or(0, |a| a.port());
    let (pa, pb) = (free_udp_port(), free_udp_port());
    let a = Daemon::start("forge-a", &peer_config(10, 0.001, 200, pa, &[pb, ps]));
    let b = Daemon::start("forge-b", &peer_config(10, 0.001, 200, pb, &[pa]));
    let mut ca = a.connect();
    ca.send(b"X\n".repeat(4).as_slice());
    assert_eq!(ca.answers(4), pattern(4, 0));
    let mut buf = [0u8; 2048];
    let (n, _) = sniffer
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("no report captured: {e}"));
    let captured = buf[..n].to_vec();
    std::thread::sleep(Duration::from_millis(300));
    let to: SocketAddr = format!("127.0.0.1:{pb}")
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    // Replays, a forgery with another secret, a tampered copy, garbage.
    for _ in 0..3 {
        sniffer
            .send_to(&captured, to)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let other = peer::Key::new(b"not the shared secret at all!!").unwrap_or_else(|e| panic!("{e}"));
    let mut seq = 0;
    let entries = vec![(Box::from(&b"X"[..]), 100u32)];
    for dg in peer::wire::encode(
        &other,
        77,
        &mut seq,
        peer::unix_ms(),
        b"dthrottle",
        &entries,
    ) {
        sniffer.send_to(&dg, to).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut tampered = captured.clone();
    let last = tampered.len() - 33;
    tampered[last] = tampered[last].wrapping_add(50);
    sniffer
        .send_to(&tampered, to)
        .unwrap_or_else(|e| panic!("{e}"));
    sniffer
        .send_to(b"X 1000000\n", to)
        .unwrap_or_else(|e| panic!("{e}"));
    sniffer
        .send_to(&[0xffu8; 1400], to)
        .unwrap_or_else(|e| panic!("{e}"));
    // A correctly signed datagram from an unknown sender address would need
    // another IP; the allow-list is tested in crates/peer.
    let key = peer::Key::new(SECRET).unwrap_or_else(|e| panic!("{e}"));
    let stale = peer::wire::encode(
        &key,
        78,
        &mut seq,
        peer::unix_ms() - 60_000,
        b"dthrottle",
        &entries,
    );
    for dg in stale {
        sniffer.send_to(&dg, to).unwrap_or_else(|e| panic!("{e}"));
    }
    std::thread::sleep(Duration::from_millis(300));
    // B: 10 − 4 from A's one genuine report.
    let mut cb = b.connect();
    cb.send(b"X\n".repeat(8).as_slice());
    assert_eq!(cb.answers(8), pattern(6, 2));
}

/// When a peer dies the survivor keeps limiting locally, remembering the
/// debt it had learnt.
#[test]
fn a_dead_peer_leaves_the_other_limiting_locally() {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    let a = Daemon::start("dies-a", &peer_config(5, 0.001, 200, pa, &[pb]));
    let mut b = Daemon::start("dies-b", &peer_config(5, 0.001, 200, pb, &[pa]));
    let mut cb = b.connect();
    cb.send(b"Z\nZ\nZ\n");
    assert_eq!(cb.answers(3), pattern(3, 0));
    std::thread::sleep(Duration::from_millis(600));
    b.kill();
    // A's reports now go to a closed port (ICMP errors): it carries on.
    let mut ca = a.connect();
    ca.send(b"Y\nY\n");
    assert_eq!(ca.answers(2), pattern(2, 0));
    std::thread::sleep(Duration::from_millis(1000));
    ca.send(b"Z\n".repeat(3).as_slice());
    assert_eq!(ca.answers(3), pattern(2, 1), "B's 3 hits were remembered");
    ca.send(b"Y\n".repeat(4).as_slice());
    assert_eq!(ca.answers(4), pattern(3, 1), "local limit still applies");
}

/// Issue 21: 2x max_tags distinct tags within one period do not lock a new
/// tag out, and the flood's hits (of tags evicted before the report) still
/// reach the peer: with burst 1, B (room for them all) refuses every one
/// of them afterwards.
#[test]
fn a_flood_of_tags_locks_nobody_out_and_its_hits_reach_the_peer() {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    let a = Daemon::start(
        "flood-a",
        &(peer_config(1, 0.001, 1000, pa, &[pb]) + "max_tags = 100\n"),
    );
    let b = Daemon::start(
        "flood-b",
        &(peer_config(1, 0.001, 1000, pb, &[pa]) + "max_tags = 1000\n"),
    );
    let mut ca = a.connect();
    let flood: String = (0..200).map(|i| format!("flood-{i}\n")).collect();
    ca.send(flood.as_bytes());
    assert_eq!(ca.answers(200), pattern(200, 0), "every flood tag is new");
    assert!(ca.ask("honest"), "a new tag after the flood");
    // Two periods: A's report (table and evicted tags) reaches B.
    std::thread::sleep(Duration::from_millis(2500));
    let mut cb = b.connect();
    cb.send(flood.as_bytes());
    assert_eq!(cb.answers(200), pattern(0, 200), "B learnt every flood hit");
    assert!(!cb.ask("honest"));
    assert!(cb.ask("honest-2"));
}
