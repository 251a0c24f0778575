//! Peer traffic of one peered limiter: `tags` active client keys (IPv4 text
//! tags, one hit each per period) reported every second through the real
//! UDP transport to one peer on loopback. Prints bytes and datagrams per
//! second per peer (multiply by the number of peers), and the time one
//! report takes to build. `cargo bench -p rate-limit-core --bench peer_bytes`.

#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{Admission, Key, KeyedLimiter, Limits};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

fn main() {
    let sink = UdpSocket::bind("127.0.0.1:0").expect("sink");
    let sink_addr = sink.local_addr().expect("addr");
    // Drain the sink so the kernel never drops (the sender counts bytes sent).
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while sink.recv_from(&mut buf).is_ok() {}
    });
    let key = peer::Key::new(b"bench-secret-0123456789abcdef").expect("key");
    let transport = peer::Transport::start(peer::Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        peers: vec![sink_addr],
        group: None,
        multicast_interface: Ipv4Addr::UNSPECIFIED,
        multicast_ttl: 1,
        key,
        policy: peer::Policy {
            allowed: vec![],
            window_ms: 10_000,
            max_senders: 16,
        },
        inbound_capacity: 16,
        outbound_capacity: 16,
    })
    .expect("transport");
    println!("| active tags | --peer-max-tags | tags sent/period | datagrams/s | bytes/s (per peer) | report build |");
    println!("|---|---|---|---|---|---|");
    for (tags, max_tags) in [(1_000, 10_000), (100_000, 10_000), (100_000, 100_000)] {
        let limits = Limits {
            limit: None,
            rate: Some((10.0, 20)),
            queue: 0,
            maxage: None,
            block: None,
            auto: None,
        };
        let l: KeyedLimiter<W, MonotonicClock> =
            KeyedLimiter::peered(limits, tags * 2, tags, MonotonicClock);
        let names: Vec<(Key, Vec<u8>)> = (0..tags as u32)
            .map(|i| {
                let tag = Ipv4Addr::from(0x0a00_0000 + i).to_string().into_bytes();
                (l.key(&tag), tag)
            })
            .collect();
        let before = transport.stats();
        let periods = 5;
        let mut build = Duration::ZERO;
        let start = Instant::now();
        for p in 0..periods {
            for (k, tag) in &names {
                assert!(matches!(l.admit(*k, tag), Admission::Go(_)));
            }
            let t = Instant::now();
            let report = l.peer_report(max_tags);
            build += t.elapsed();
            transport.send(peer::Outgoing {
                kind: peer::Kind::Hits,
                group: Box::from(&b"api"[..]),
                entries: report.entries,
            });
            // One report per second of wall time.
            let due = start + Duration::from_secs(p + 1);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let after = transport.stats();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "| {tags} | {max_tags} | {} | {:.0} | {:.0} | {:.1} ms |",
            tags.min(max_tags),
            (after.datagrams_sent - before.datagrams_sent) as f64 / secs,
            (after.bytes_sent - before.bytes_sent) as f64 / secs,
            build.as_secs_f64() * 1000.0 / periods as f64
        );
    }
}
