//! Transports on loopback: reports exchanged, replays and forgeries refused,
//! multicast members, senders over the table counted.

use super::*;

fn transport(peers: Vec<SocketAddr>) -> Transport {
    transport_on("127.0.0.1:0", peers, None)
}

fn transport_on(listen: &str, peers: Vec<SocketAddr>, group: Option<SocketAddr>) -> Transport {
    transport_with(listen, peers, group, policy())
}

fn transport_with(
    listen: &str,
    peers: Vec<SocketAddr>,
    group: Option<SocketAddr>,
    policy: Policy,
) -> Transport {
    Transport::start(Config {
        listen: listen.parse().unwrap_or(LOCAL),
        peers,
        group,
        multicast_interface: Ipv4Addr::LOCALHOST,
        multicast_ttl: 1,
        key: key(),
        policy,
        inbound_capacity: 64,
        outbound_capacity: 8,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Two transports on loopback; a third socket records what one sends, then
/// replays it and sends forgeries and garbage: only the original counts.
#[test]
fn transports_exchange_reports_on_loopback_and_refuse_replays_and_forgeries() {
    let sniffer = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    sniffer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("{e}"));
    let b = transport(vec![]);
    let a = transport(vec![b.local_addr(), sniffer.local_addr().unwrap_or(LOCAL)]);
    let report = Outgoing {
        group: Box::from(&b"rule"[..]),
        kind: Kind::Hits,
        entries: entries(3, 8),
    };
    assert!(a.send(report.clone()));
    let d = wait_for("the report", || b.recv());
    assert_eq!(
        (d.sender, &*d.group, &d.entries),
        (a.id(), &b"rule"[..], &report.entries)
    );
    let mut buf = [0u8; 2048];
    let (n, _) = sniffer
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("{e}"));
    let captured = buf[..n].to_vec();
    // Replay, forgery, garbage, oversize.
    let to = b.local_addr();
    let send = |d: &[u8]| sniffer.send_to(d, to).unwrap_or_else(|e| panic!("{e}"));
    send(&captured);
    let mut forged = captured.clone();
    forged[40] ^= 0x55;
    send(&forged);
    send(b"GET / HTTP/1.0\r\n\r\n and some more bytes to pass the minimum size check ....");
    send(&[0u8; 1500]);
    send(&captured[..20]);
    let s = wait_for("the bad datagrams to be counted", || {
        let s = b.stats();
        (s.replay + s.bad_mac + s.garbage + s.oversized + s.truncated == 5).then_some(s)
    });
    assert_eq!(
        (s.replay, s.bad_mac, s.garbage, s.oversized, s.truncated),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(b.recv(), None, "nothing bad was handed out");
    assert_eq!(a.stats().reports_sent, 1);
    assert_eq!(a.stats().datagrams_sent, 2);
}

/// Two members of a multicast group on one host (loopback interface): each
/// hears the other, and not itself.
#[test]
fn multicast_members_hear_each_other_on_loopback() {
    let port = {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        probe.local_addr().map_or(47_000, |a| a.port())
    };
    let group: SocketAddr = format!("239.255.42.7:{port}").parse().unwrap_or(LOCAL);
    let listen = format!("0.0.0.0:{port}");
    let a = transport_on(&listen, vec![], Some(group));
    let b = transport_on(&listen, vec![], Some(group));
    let report = Outgoing {
        group: Box::from(&b"g"[..]),
        kind: Kind::Hits,
        entries: entries(2, 4),
    };
    assert!(a.send(report.clone()));
    let d = wait_for("the multicast report", || b.recv());
    assert_eq!((d.sender, d.entries), (a.id(), report.entries));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.recv(), None, "a member does not hear itself");
}

/// Authentic datagrams of senders beyond `max_senders` are dropped and
/// counted as such (and in `rejected`, the plugin's `peer_rejected`).
#[test]
fn senders_over_the_table_are_counted() {
    let b = transport_with(
        "127.0.0.1:0",
        vec![],
        None,
        Policy {
            max_senders: 2,
            ..policy()
        },
    );
    let s = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    for sender in 1..=5 {
        s.send_to(&one(sender + 100, 0, crate::unix_ms()), b.local_addr())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let st = wait_for("5 datagrams", || {
        let st = b.stats();
        (st.datagrams_received == 5).then_some(st)
    });
    assert_eq!((st.senders_dropped, st.rejected()), (3, 3));
    assert!(b.recv().is_some() && b.recv().is_some() && b.recv().is_none());
}
