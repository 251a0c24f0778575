//! Datagrams and the receiver: round trips, bad datagrams, allowed networks,
//! replays, the sender table, secrets from files.

use super::*;

#[test]
fn a_report_round_trips_split_over_datagrams_of_at_most_1400_bytes() {
    let report = entries(500, 200);
    let mut seq = 7;
    let dgs = wire::encode(&key(), 42, &mut seq, NOW, b"rule-1", &report);
    assert!(dgs.len() >= 500 * 200 / MAX_DATAGRAM);
    assert_eq!(seq, 7 + dgs.len() as u64);
    let mut r = Receiver::new(key(), 1, policy());
    let mut got = Vec::new();
    for (i, dg) in dgs.iter().enumerate() {
        assert!(
            dg.len() <= MAX_DATAGRAM,
            "datagram {i} is {} bytes",
            dg.len()
        );
        let d = r.accept(LOCAL, dg, NOW).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            (d.sender, d.seq, &*d.group),
            (42, 7 + i as u64, &b"rule-1"[..])
        );
        got.extend(d.entries);
    }
    assert_eq!(got, report);
    // An empty report is no datagram; entries the core never makes are skipped.
    assert!(wire::encode(&key(), 1, &mut seq, NOW, b"g", &[]).is_empty());
    let odd: Vec<Entry> = vec![(Box::from(&b""[..]), 1), (Box::from(&b"t"[..]), 0)];
    assert!(wire::encode(&key(), 1, &mut seq, NOW, b"g", &odd).is_empty());
}

#[test]
fn bad_datagrams_are_classified() {
    let mut r = Receiver::new(key(), 1, policy());
    let good = one(5, 0, NOW);
    assert_eq!(
        r.accept(LOCAL, &good[..MIN_DATAGRAM - 1], NOW),
        Err(Reject::Truncated)
    );
    assert_eq!(
        r.accept(LOCAL, &vec![0; MAX_DATAGRAM + 1], NOW),
        Err(Reject::Oversized)
    );
    assert_eq!(r.accept(LOCAL, &[b'x'; 100], NOW), Err(Reject::Garbage));
    let mut v3 = good.clone();
    v3[2] = 3;
    assert_eq!(r.accept(LOCAL, &v3, NOW), Err(Reject::WrongVersion));
    // Relabelled as a report of blocks, it is no longer authentic.
    let mut v2 = good.clone();
    v2[2] = wire::BLOCKS_VERSION;
    assert_eq!(r.accept(LOCAL, &v2, NOW), Err(Reject::BadMac));
    let mut flipped = good.clone();
    let last = flipped.len() - 40;
    flipped[last] ^= 1;
    assert_eq!(r.accept(LOCAL, &flipped, NOW), Err(Reject::BadMac));
    let other = Key::new(b"another secret of 16+ bytes").unwrap_or_else(|e| panic!("{e}"));
    let mut s = 0;
    let forged = wire::encode(&other, 5, &mut s, NOW, b"g", &entries(1, 4)).remove(0);
    assert_eq!(r.accept(LOCAL, &forged, NOW), Err(Reject::BadMac));
    let stranger = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 9);
    assert_eq!(r.accept(stranger, &good, NOW), Err(Reject::UnknownSender));
    assert_eq!(r.accept(LOCAL, &one(1, 0, NOW), NOW), Err(Reject::Own));
    assert!(r.accept(LOCAL, &good, NOW).is_ok());
}

/// An allow list of networks: a sender inside one is accepted, one outside
/// every network is an unknown sender, whatever its MAC; an IPv4 sender
/// seen as an IPv4-mapped IPv6 address matches its IPv4 network.
#[test]
fn allowed_networks_admit_their_senders_only() {
    let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap_or_else(|e| panic!("{e}"));
    let mut r = Receiver::new(
        key(),
        1,
        Policy {
            allowed: vec![net("10.1.0.0/16"), net("127.0.0.1/32")],
            ..policy()
        },
    );
    let at = |ip: &str| SocketAddr::new(ip.parse().unwrap_or_else(|e| panic!("{e}")), 9);
    assert!(r.accept(at("10.1.200.3"), &one(5, 0, NOW), NOW).is_ok());
    assert!(r
        .accept(at("::ffff:10.1.0.9"), &one(5, 1, NOW), NOW)
        .is_ok());
    assert!(r.accept(at("127.0.0.1"), &one(5, 2, NOW), NOW).is_ok());
    for stranger in ["10.2.0.1", "127.0.0.2", "::1"] {
        assert_eq!(
            r.accept(at(stranger), &one(5, 3, NOW), NOW),
            Err(Reject::UnknownSender),
            "{stranger}"
        );
    }
    // Empty: any sender (the MAC still applies).
    let mut any = Receiver::new(
        key(),
        1,
        Policy {
            allowed: vec![],
            ..policy()
        },
    );
    assert!(any.accept(at("127.0.0.2"), &one(5, 0, NOW), NOW).is_ok());
}

/// Allowed networks written as IPv4-mapped IPv6 match the canonical (IPv4)
/// sources the receiver checks.
#[test]
fn mapped_allowed_networks_are_canonicalised() {
    use crate::receiver::{canonical_addr, canonical_net};
    let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        canonical_net(net("::ffff:10.1.2.3/112")),
        net("10.1.0.0/16")
    );
    assert_eq!(
        canonical_net(net("::ffff:10.1.2.3/128")),
        net("10.1.2.3/32")
    );
    assert_eq!(canonical_net(net("::ffff:0:0/96")), net("0.0.0.0/0"));
    assert_eq!(canonical_net(net("2001:db8::1/32")), net("2001:db8::/32"));
    assert_eq!(canonical_net(net("::1/128")), net("::1/128"));
    assert_eq!(canonical_net(net("10.1.2.3/16")), net("10.1.0.0/16"));
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:7412"
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        canonical_addr(mapped),
        "127.0.0.1:7412".parse().unwrap_or_else(|e| panic!("{e}"))
    );
    let mut r = Receiver::new(
        key(),
        1,
        Policy {
            allowed: vec![net("::ffff:10.1.0.0/112"), net("::ffff:127.0.0.1/128")],
            ..policy()
        },
    );
    let at = |ip: &str| SocketAddr::new(ip.parse().unwrap_or_else(|e| panic!("{e}")), 9);
    assert!(r.accept(at("10.1.200.3"), &one(5, 0, NOW), NOW).is_ok());
    assert!(r
        .accept(at("::ffff:10.1.0.9"), &one(5, 1, NOW), NOW)
        .is_ok());
    assert!(r.accept(at("127.0.0.1"), &one(5, 2, NOW), NOW).is_ok());
    assert_eq!(
        r.accept(at("10.2.0.1"), &one(5, 3, NOW), NOW),
        Err(Reject::UnknownSender)
    );
}

#[test]
fn replays_are_rejected_and_restarted_senders_accepted() {
    let mut r = Receiver::new(key(), 1, policy());
    assert!(r.accept(LOCAL, &one(5, 10, NOW), NOW).is_ok());
    assert_eq!(r.accept(LOCAL, &one(5, 10, NOW), NOW), Err(Reject::Replay));
    // Out of order within the 64-datagram window is fine, once.
    assert!(r.accept(LOCAL, &one(5, 12, NOW), NOW).is_ok());
    assert!(r.accept(LOCAL, &one(5, 11, NOW), NOW).is_ok());
    assert_eq!(r.accept(LOCAL, &one(5, 11, NOW), NOW), Err(Reject::Replay));
    assert!(r.accept(LOCAL, &one(5, 200, NOW), NOW).is_ok());
    assert_eq!(
        r.accept(LOCAL, &one(5, 136, NOW), NOW),
        Err(Reject::Replay),
        "older than the window"
    );
    assert!(r.accept(LOCAL, &one(5, 137, NOW), NOW).is_ok());
    // Outside the time window, either way.
    assert_eq!(
        r.accept(LOCAL, &one(5, 300, NOW - 10_001), NOW),
        Err(Reject::Stale)
    );
    assert_eq!(
        r.accept(LOCAL, &one(5, 301, NOW + 10_001), NOW),
        Err(Reject::Stale)
    );
    // A restarted sender has a new id and starts again from 0.
    assert!(r.accept(LOCAL, &one(6, 0, NOW), NOW).is_ok());
    assert!(r.accept(LOCAL, &one(6, 1, NOW), NOW).is_ok());
}

#[test]
fn senders_are_bounded_and_idle_ones_forgotten() {
    let mut r = Receiver::new(key(), 1, policy());
    for s in 10..14 {
        assert!(r.accept(LOCAL, &one(s, 0, NOW), NOW).is_ok());
    }
    assert_eq!(
        r.accept(LOCAL, &one(20, 0, NOW), NOW),
        Err(Reject::TooManySenders)
    );
    // Kept for twice the window after their last datagram, then forgotten.
    let later = NOW + 20_000;
    assert_eq!(
        r.accept(LOCAL, &one(20, 0, later), later),
        Err(Reject::TooManySenders)
    );
    let later = NOW + 20_001;
    assert!(r.accept(LOCAL, &one(20, 0, later), later).is_ok());
    assert_eq!(r.senders(), 1);
}

/// The documented memory cost of a tracked sender is its table slot.
#[test]
fn a_sender_slot_is_what_the_docs_say() {
    assert_eq!(
        std::mem::size_of::<(u64, crate::receiver::Window)>() + 1,
        crate::receiver::SENDER_BYTES
    );
}

/// A sender whose clock runs ahead sends datagrams that stay fresh up to
/// twice the window after they arrive: its replay window must outlive that,
/// even when the sender table is full and new senders want its place.
#[test]
fn a_fresh_datagram_of_a_sender_ahead_cannot_be_replayed_after_it_went_quiet() {
    const W: u64 = 10_000;
    let mut r = Receiver::new(
        key(),
        1,
        Policy {
            max_senders: 2,
            ..policy()
        },
    );
    // Sent with a clock 9.5 s ahead: fresh until NOW + 19.5 s.
    let captured = one(5, 0, NOW + 9_500);
    assert!(r.accept(LOCAL, &captured, NOW).is_ok());
    assert!(r.accept(LOCAL, &one(7, 0, NOW), NOW).is_ok());
    // Both go quiet for more than the window; a new sender wants in.
    let later = NOW + W + 1;
    let newcomer = r.accept(LOCAL, &one(6, 0, later), later);
    assert_eq!(
        r.accept(LOCAL, &captured, later + 1),
        Err(Reject::Replay),
        "replayed while still fresh"
    );
    assert_eq!(
        newcomer,
        Err(Reject::TooManySenders),
        "the quiet senders' windows are still needed"
    );
    // Once every datagram the sender could have sent is stale, its window
    // goes; the captured datagram is then refused as stale.
    let much_later = NOW + 2 * W + 1;
    assert!(r.accept(LOCAL, &one(6, 0, much_later), much_later).is_ok());
    assert_eq!(r.senders(), 1);
    assert_eq!(r.accept(LOCAL, &captured, much_later), Err(Reject::Stale));
}

#[test]
fn secrets_from_files() {
    let dir = std::env::temp_dir().join(format!("peer-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let f = dir.join("s");
    std::fs::write(&f, b"0123456789abcdef-test-secret\n").unwrap_or_else(|e| panic!("{e}"));
    let k = Key::from_file(&f).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        k.verify(b"x", &key().sign(b"x")),
        "the trailing newline is not part of the secret"
    );
    std::fs::write(&f, b"short\n").unwrap_or_else(|e| panic!("{e}"));
    let e = Key::from_file(&f).map(|_| ()).unwrap_err();
    assert!(
        e.contains(&f.display().to_string()) && e.contains("at least 16"),
        "{e}"
    );
    let e = Key::from_file(&dir.join("missing"))
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("missing"), "{e}");
    // A path mistyped to something large is refused, not read whole.
    let big = vec![b'x'; crate::auth::MAX_SECRET_FILE_BYTES as usize + 1];
    std::fs::write(&f, big).unwrap_or_else(|e| panic!("{e}"));
    let e = Key::from_file(&f).map(|_| ()).unwrap_err();
    assert!(e.contains("larger than 65536 bytes"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report of blocks is version 2: it round trips as such, and a receiver
/// that only speaks version 1 drops it whole as another version.
#[test]
fn a_report_of_blocks_is_its_own_version() {
    let blocks: Vec<Entry> = vec![(Box::from(&b"ip=192.0.2.7"[..]), 300_000)];
    let mut seq = 0;
    let dgs = wire::encode_kind(&key(), 3, &mut seq, NOW, b"g", Kind::Blocks, &blocks);
    assert_eq!(dgs.len(), 1);
    assert_eq!(dgs[0][2], wire::BLOCKS_VERSION);
    let mut r = Receiver::new(key(), 1, policy());
    let d = r
        .accept(LOCAL, &dgs[0], NOW)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!((d.kind, d.entries), (Kind::Blocks, blocks));
    let hits = wire::encode(&key(), 3, &mut seq, NOW, b"g", &entries(1, 2));
    let d = r
        .accept(LOCAL, &hits[0], NOW)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(d.kind, Kind::Hits);
    let mut v3 = dgs[0].clone();
    v3[2] = 3;
    assert_eq!(wire::precheck(&v3), Err(Reject::WrongVersion));
}
