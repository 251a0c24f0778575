//! Longest-prefix match over 1 M prefixes (IPv4 and IPv6 lists of 1 M
//! random prefixes each): lookup time (criterion), and heap bytes per
//! prefix and build time (printed; a counting allocator).
//!
//! Run: `cargo bench -p ip-throttle-core --bench lpm`.

#![forbid(unsafe_code)]

use std::alloc::System;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use ip_throttle_core::CidrList;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn heap() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize + s.bytes_reallocated
}

const N: usize = 1_000_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// 1 M IPv4 prefixes of /8 to /32 (most /20 to /32, as real block lists),
/// as list-file text (the build measured is the real parser's).
fn v4_text(r: &mut Rng) -> String {
    let mut s = String::with_capacity(N * 18);
    for _ in 0..N {
        let x = r.next();
        let len = if x % 10 == 0 {
            8 + (x >> 8) % 12
        } else {
            20 + (x >> 8) % 13
        };
        let a = Ipv4Addr::from((x >> 20) as u32);
        s.push_str(&format!("{a}/{len}\n"));
    }
    s
}

/// 1 M IPv6 prefixes of /16 to /128 inside 2000::/3.
fn v6_text(r: &mut Rng) -> String {
    let mut s = String::with_capacity(N * 40);
    for _ in 0..N {
        let hi = (r.next() as u128) << 64 | r.next() as u128;
        let a = (hi & (u128::MAX >> 3)) | (1u128 << 125);
        let len = [32, 48, 56, 64, 128][(r.next() % 5) as usize];
        s.push_str(&format!("{}/{len}\n", Ipv6Addr::from(a)));
    }
    s
}

fn build(text: &str, what: &str) -> CidrList {
    let before = heap();
    let t = Instant::now();
    let l = ip_throttle_core::lists::parse(text, what).unwrap();
    let took = t.elapsed();
    let bytes = heap() - before;
    println!(
        "{what}: {} prefixes, built in {:.2} s, {:.1} MB heap, {:.0} bytes/prefix",
        l.len(),
        took.as_secs_f64(),
        bytes as f64 / 1e6,
        bytes as f64 / l.len() as f64
    );
    l
}

fn bench(c: &mut Criterion) {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let v4 = build(&v4_text(&mut r), "ipv4 list");
    let v6 = build(&v6_text(&mut r), "ipv6 list");
    let probes4: Vec<IpAddr> = (0..65_536)
        .map(|_| IpAddr::V4(Ipv4Addr::from(r.next() as u32)))
        .collect();
    let probes6: Vec<IpAddr> = (0..65_536)
        .map(|_| {
            let a =
                ((r.next() as u128) << 64 | r.next() as u128) & (u128::MAX >> 3) | (1u128 << 125);
            IpAddr::V6(Ipv6Addr::from(a))
        })
        .collect();
    let hits = probes4.iter().filter(|p| v4.contains(**p)).count();
    println!(
        "ipv4 probes matching a prefix: {:.1} %",
        hits as f64 * 100.0 / probes4.len() as f64
    );
    let mut g = c.benchmark_group("lpm");
    let mut i = 0;
    g.bench_function("ipv4_1M_prefixes", |b| {
        b.iter(|| {
            i = (i + 1) & 0xffff;
            v4.longest(black_box(probes4[i]))
        })
    });
    g.bench_function("ipv6_1M_prefixes", |b| {
        b.iter(|| {
            i = (i + 1) & 0xffff;
            v6.longest(black_box(probes6[i]))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
