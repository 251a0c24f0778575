//! Per-client admission at 1 M live keys (issue 9's target: median ≤ 150 ns
//! with 2 threads contending, no global lock): the whole decision a keyed
//! rule makes per request, from the client's address bytes: the keyed
//! hash, the table lookup under the key's shard lock, and the GCRA step.
//!
//! Run: `cargo bench -p rate-limit-core --bench keyed_admission`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{Admission, Limiter, Limits};

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

fn decide(l: &Arc<Limiter<Nobody>>, i: u32) -> bool {
    let Some(t) = l.keys() else { return false };
    let key = t.hash(&addr(i % KEYS));
    matches!(l.admit(Some(key)), Admission::Go(_))
}

fn keyed_admission(c: &mut Criterion) {
    // A rate high enough that every decision admits (the common case).
    let limits = Limits {
        limit: None,
        rate: Some((1e6, 1_000_000)),
        queue: 0,
        maxage: None,
    };
    let l: Arc<Limiter<Nobody>> = Limiter::keyed(limits, KEYS as usize, MonotonicClock);
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
    g.finish();
}

criterion_group!(benches, keyed_admission);
criterion_main!(benches);
