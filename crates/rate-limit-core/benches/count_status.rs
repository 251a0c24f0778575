//! `--count-status`'s hot path: the status check a response makes (a bit
//! test, no allocation) and the keyed check-then-charge at 1 M live keys
//! (compare `keyed_admission`'s 1M_keys_1_thread, the request-charged rule).
//!
//! Run: `cargo bench -p rate-limit-core --bench count_status`.
#![forbid(unsafe_code)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::status::StatusList;
use rate_limit_core::{Admission, KeyedLimiter, Limits};

const KEYS: u32 = 1_000_000;

struct Nobody;

impl Waiter for Nobody {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

fn addr(i: u32) -> [u8; 7] {
    let a = i.wrapping_mul(2_654_435_761).to_be_bytes();
    [0, 0, 4, a[0], a[1], a[2], a[3]]
}

fn count_status(c: &mut Criterion) {
    let mut g = c.benchmark_group("count_status");
    let list = StatusList::parse("401,403,5xx").expect("valid");
    let mut s = 100u16;
    g.bench_function("status_list_contains", |b| {
        b.iter(|| {
            s = if s >= 599 { 100 } else { s + 7 };
            black_box(list.contains(black_box(s)))
        })
    });
    let limits = Limits {
        limit: None,
        rate: Some((1e6, 1_000_000)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let l: KeyedLimiter<Nobody> = KeyedLimiter::new(limits, KEYS as usize, MonotonicClock);
    l.set_charge_on_response();
    for i in 0..KEYS {
        let _ = l.admit(l.key(&addr(i)), &[]);
    }
    let mut i = 0u32;
    g.bench_function("check_1M_keys", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            let key = l.key(&addr(i % KEYS));
            black_box(matches!(l.admit(key, &[]), Admission::Go(_)))
        })
    });
    g.bench_function("charge_1M_keys", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            let key = l.key(&addr(i % KEYS));
            black_box(l.charge(key))
        })
    });
    g.finish();
}

criterion_group!(benches, count_status);
criterion_main!(benches);
