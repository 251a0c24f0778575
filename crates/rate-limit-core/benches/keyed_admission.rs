//! Per-client admission at 1 M live keys (issue 9's target: median ≤ 150 ns
//! with 2 threads contending, no global lock): the whole decision a keyed
//! rule makes per request, from the client's address bytes: the keyed
//! hash, the table lookup under the key's shard lock, and the GCRA step.
//! `new_key_at_bound_1_thread`: the same decision for addresses never seen
//! (a churn attack; issue 9's "within 2× of steady state").
//! `floor_one_dependent_miss_48MB` is what one random memory access costs
//! on the machine when nothing overlaps it (see BENCHMARKS.md).
//!
//! Run: `cargo bench -p rate-limit-core --bench keyed_admission`.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{Admission, KeyedLimiter, Limits};

const KEYS: u32 = 1_000_000;

/// Never queued (the benched rules have no concurrency limit).
struct Nobody;

impl Waiter for Nobody {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

/// A client address (IPv4 bytes) spread over the key space, as `--key=ip` builds it.
fn addr(i: u32) -> [u8; 7] {
    let a = i.wrapping_mul(2_654_435_761).to_be_bytes();
    [0, 0, 4, a[0], a[1], a[2], a[3]]
}

fn decide(l: &KeyedLimiter<Nobody>, i: u32) -> bool {
    decide_addr(l, i % KEYS)
}

fn decide_addr(l: &KeyedLimiter<Nobody>, n: u32) -> bool {
    let key = l.key(&addr(n));
    matches!(l.admit(key, &[]), Admission::Go(_))
}

fn keyed_admission(c: &mut Criterion) {
    // A rate high enough that every decision admits (the common case).
    let limits = Limits {
        limit: None,
        rate: Some((1e6, 1_000_000)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let l: KeyedLimiter<Nobody> = KeyedLimiter::new(limits, KEYS as usize, MonotonicClock);
    for i in 0..KEYS {
        decide(&l, i);
    }
    let mut g = c.benchmark_group("keyed_admission");
    let mut i = 0u32;
    g.bench_function("1M_keys_1_thread", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            black_box(decide(&l, black_box(i)))
        })
    });
    // A second thread makes the same decisions on the same table meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let other = {
        let (l, stop) = (l.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut j = 1u32;
            while !stop.load(Ordering::Relaxed) {
                j = j.wrapping_add(104_729);
                black_box(decide(&l, j));
            }
        })
    };
    g.bench_function("1M_keys_2_threads", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            black_box(decide(&l, black_box(i)))
        })
    });
    stop.store(true, Ordering::Relaxed);
    let _ = other.join();
    // A churn attack at the level of the whole decision: every address is
    // new (numbers above the live ones; `addr` is a bijection on u32), so
    // each decision inserts a key and evicts an idle one.
    let mut n = KEYS;
    g.bench_function("new_key_at_bound_1_thread", |b| {
        b.iter(|| {
            n = n.wrapping_add(1).max(KEYS);
            black_box(decide_addr(&l, black_box(n)))
        })
    });
    // The floor under any table at 1 M keys: one cache miss whose address
    // depends on the previous load (no overlap between iterations), over a
    // buffer the size of the table's slot array (1.5 M slots x 32 B).
    let chain = chain(1_500_000 * 32 / 64);
    let mut p = 0usize;
    g.bench_function("floor_one_dependent_miss_48MB", |b| {
        b.iter(|| {
            p = chain[p] as usize;
            p
        })
    });
    g.finish();
}

/// A random cycle through `lines` cache lines (Sattolo's shuffle), one u64
/// used per 64-byte line: `v[i]` is the index of the next line's word.
fn chain(lines: usize) -> Vec<u64> {
    let mut order: Vec<usize> = (0..lines).collect();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    let mut v = vec![0u64; lines * 8];
    for (i, &at) in order.iter().enumerate() {
        v[at * 8] = (order[(i + 1) % lines] * 8) as u64;
    }
    v
}

criterion_group!(benches, keyed_admission);
criterion_main!(benches);
