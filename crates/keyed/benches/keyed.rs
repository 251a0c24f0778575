//! Decision time of the key table at its bound (1 M live keys, 16-byte
//! state): a live key's state updated, and a new key inserted by evicting an
//! idle one (a churn attack), on one thread and with a second thread doing
//! the same on the same table ("2threads": ATS's two exec threads).
//!
//! Run: `cargo bench -p keyed --bench keyed`. Memory and the 10 M-key churn
//! run: `cargo bench -p keyed --bench memory`.

#![forbid(unsafe_code)]

mod common;

use std::sync::Arc;

use common::{contended, decide, fill, key, live_keys, timed, KEYS, S};
use criterion::{criterion_group, criterion_main, Criterion};
use keyed::KeyTable;

fn live(c: &mut Criterion) {
    let t = Arc::new(KeyTable::<S>::new(KEYS));
    fill(&t);
    let evicted = t.evicted();
    let keys = live_keys(&t);
    let mut g = c.benchmark_group("keyed");
    let mut i = 0;
    g.bench_function("with_live_key_1M", |b| {
        b.iter(|| {
            decide(&t, keys[i]);
            i = (i + 1) % keys.len();
        })
    });
    g.bench_function("with_live_key_1M_2threads", |b| {
        b.iter_custom(|iters| {
            let (t2, k2) = (t.clone(), keys.clone());
            let mut j = (i + k2.len() / 2) % k2.len();
            contended(
                move || {
                    decide(&t2, k2[j]);
                    j = (j + 1) % k2.len();
                },
                || {
                    timed(iters, || {
                        decide(&t, keys[i]);
                        i = (i + 1) % keys.len();
                    })
                },
            )
        })
    });
    g.finish();
    assert_eq!((t.len(), t.evicted()), (KEYS, evicted), "live keys only");
}

fn churn(c: &mut Criterion) {
    let t = Arc::new(KeyTable::<S>::new(KEYS));
    fill(&t);
    let keys = live_keys(&t);
    let mut g = c.benchmark_group("churn");
    // Key numbers far above the fill's: every one is new.
    let mut next = 1u64 << 40;
    g.bench_function("new_key_at_bound", |b| {
        b.iter(|| {
            decide(&t, key(next));
            next += 1;
        })
    });
    let mut helper_next = 1u64 << 50;
    g.bench_function("new_key_at_bound_2threads", |b| {
        b.iter_custom(|iters| {
            let t2 = t.clone();
            let mut n = helper_next;
            helper_next += 1 << 36;
            contended(
                move || {
                    decide(&t2, key(n));
                    n += 1;
                },
                || {
                    timed(iters, || {
                        decide(&t, key(next));
                        next += 1;
                    })
                },
            )
        })
    });
    // The clients' decisions while an attacker churns on the other thread.
    let mut i = 0;
    g.bench_function("live_key_while_other_thread_churns", |b| {
        b.iter_custom(|iters| {
            let t2 = t.clone();
            let mut n = helper_next;
            helper_next += 1 << 36;
            contended(
                move || {
                    decide(&t2, key(n));
                    n += 1;
                },
                || {
                    timed(iters, || {
                        decide(&t, keys[i]);
                        i = (i + 1) % keys.len();
                    })
                },
            )
        })
    });
    g.finish();
    assert_eq!(t.len(), KEYS);
}

criterion_group!(benches, live, churn);
criterion_main!(benches);
