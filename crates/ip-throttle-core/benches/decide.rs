//! The allowed path of ip_throttle: one decision for a client in state
//! allowed (not on a list, in scope, throttled by default), with a
//! 10 000-prefix allow list and a 10 000-prefix deny list loaded, over
//! 10 000 distinct clients (target: <= 200 ns median). Also an allow-listed
//! client, and the same with path and method regexes.
//!
//! Run: `cargo bench -p ip-throttle-core --bench decide`.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use ip_throttle_core::{Action, CidrList, Options, Request, Snapshot, Throttler};
use limits::MonotonicClock;
use optspec::files::FsFiles;

/// `n` random IPv4 prefixes of /16 to /32, all inside 10.0.0.0/8 or
/// 172.16.0.0/12 so that clients in 100.64.0.0/10 match none.
fn prefixes(n: usize, seed: u64) -> CidrList {
    let mut x = seed;
    let mut l = CidrList::new();
    while l.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 16 + (x % 17) as u8;
        let base: u32 = if x & (1 << 40) == 0 {
            0x0a00_0000
        } else {
            0xac10_0000
        };
        let a = base | ((x >> 8) as u32 & 0x000f_ffff);
        l.insert(ipnet::IpNet::V4(
            ipnet::Ipv4Net::new(Ipv4Addr::from(a), len).unwrap().trunc(),
        ));
    }
    l
}

fn throttler(args: &[&str]) -> Throttler<MonotonicClock> {
    // threshold=0: probation returns to allowed at once, so every decision
    // sees a client in state allowed (the path measured), as a client
    // that comes back after the threshold does.
    let mut all = vec!["--threshold=0"];
    all.extend_from_slice(args);
    let o = Options::parse(&all, Path::new("/"), &FsFiles).unwrap();
    let mut s = Snapshot::load(o, &FsFiles).unwrap();
    s.lists.allow = Arc::new(prefixes(10_000, 0x1234_5678_9abc_def1));
    s.lists.deny = Arc::new(prefixes(10_000, 0x0fed_cba9_8765_4321));
    Throttler::new(s, MonotonicClock)
}

fn clients() -> Vec<IpAddr> {
    (0..10_000u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x6440_0000 | (i * 97))))
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ip_throttle");
    let ips = clients();
    let t = throttler(&[]);
    let mut i = 0;
    g.bench_function("allowed_10k_prefixes", |b| {
        b.iter(|| {
            let d = t.decide(black_box(&Request {
                client: ips[i].into(),
                method: b"GET",
                path: b"/webapp/index.html",
            }));
            debug_assert_eq!(d.action, Action::Pass);
            i = (i + 1) % ips.len();
            d
        })
    });
    let t = throttler(&["--path-regex=^/webapp/", "--method-regex=^(GET|HEAD)$"]);
    g.bench_function("allowed_10k_prefixes_regexes", |b| {
        b.iter(|| {
            let d = t.decide(black_box(&Request {
                client: ips[i].into(),
                method: b"GET",
                path: b"/webapp/index.html",
            }));
            i = (i + 1) % ips.len();
            d
        })
    });
    let t = throttler(&[]);
    let listed: Vec<IpAddr> = ips
        .iter()
        .map(|_| IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
        .collect();
    t.decide(&Request {
        client: listed[0].into(),
        method: b"GET",
        path: b"/",
    });
    g.bench_function("allow_or_deny_listed_10k_prefixes", |b| {
        b.iter(|| {
            let d = t.decide(black_box(&Request {
                client: listed[i].into(),
                method: b"GET",
                path: b"/",
            }));
            i = (i + 1) % listed.len();
            d
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
