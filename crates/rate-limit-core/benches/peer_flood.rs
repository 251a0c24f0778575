//! Issue 21: decision time of a peered limiter (`--peers`) and of
//! dthrottled's buckets during a flood of one-off keys, against steady
//! state. 100 000 keys (`--keys`), every key held with unreported hits
//! (within one report period); the flood sends a new key every decision
//! (2x `--keys` and more per period: each one evicts a key whose hits go
//! to the next report). A report drains the evicted keys' hits every
//! 200 000 decisions (2x `--keys` per period), untimed, as the period's
//! report would. Also the
//! same flood into a table whose keys are all in debt (peers reported
//! them over their rate): each new key evicts one of those (sticky keys).
//! And floods whose keys each come twice (a new key, then the same key
//! again: it leaves probation for main, where an idle key is rare), into a
//! table whose keys are 90 % in debt, and 100 %; one decision per
//! iteration (half of them new keys).
//!
//! Run: `cargo bench -p rate-limit-core --bench peer_flood`.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use dthrottle::{Buckets, Config, Decision};
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{Admission, KeyedLimiter, Limits};

const KEYS: usize = 100_000;
/// Decisions between two (untimed) reports: a flood of 2x `--keys`
/// distinct keys per period.
const PERIOD: u64 = 2 * KEYS as u64;

struct Nobody;

impl Waiter for Nobody {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

/// The n-th tag, as a header value might be, without allocating.
fn tag(n: u64, buf: &mut [u8; 24]) -> &[u8] {
    buf[..4].copy_from_slice(b"key-");
    let mut i = 4;
    for shift in (0..16).rev() {
        buf[i] = b"0123456789abcdef"[((n >> (shift * 4)) & 15) as usize];
        i += 1;
    }
    &buf[..i]
}

/// A live key n of `n % KEYS`, spread (multiplicative hash) so a walk
/// visits the table at random.
fn live(i: u64) -> u64 {
    (i.wrapping_mul(2_654_435_761)) % KEYS as u64
}

type L = KeyedLimiter<Nobody>;

fn admit(l: &L, n: u64) -> bool {
    let mut buf = [0u8; 24];
    let t = tag(n, &mut buf);
    matches!(l.admit(l.key(t), t), Admission::Go(_))
}

fn limiter() -> L {
    let limits = Limits {
        limit: None,
        rate: Some((1e6, 1_000_000)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let l: L = KeyedLimiter::peered(limits, KEYS, 10_000, MonotonicClock);
    for n in 0..KEYS as u64 {
        admit(&l, n);
    }
    l
}

/// Times `iters` calls of `op(i)`, with a report every [`PERIOD`] calls,
/// untimed.
fn periods(iters: u64, mut op: impl FnMut(u64), report: impl Fn()) -> Duration {
    let mut spent = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(PERIOD);
        let t = Instant::now();
        for i in done..done + n {
            op(i);
        }
        spent += t.elapsed();
        done += n;
        report();
    }
    spent
}

fn peered(c: &mut Criterion) {
    let mut g = c.benchmark_group("peer_flood");
    let l = limiter();
    let mut i = 0u64;
    g.bench_function("live_key_100k", |b| {
        b.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    i += 1;
                    black_box(admit(&l, live(i)));
                },
                || {},
            )
        })
    });
    // Every decision a new key: keys 1 << 40 and up were never seen.
    let mut n = 1u64 << 40;
    g.bench_function("new_key_flood_100k", |b| {
        b.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    n += 1;
                    assert!(admit(&l, n), "a new key was refused");
                },
                || {
                    black_box(l.peer_report(10_000));
                },
            )
        })
    });
    // A table of keys in debt (a peer reported each over its rate).
    let d = limiter();
    for k in 0..KEYS as u64 {
        let mut buf = [0u8; 24];
        d.apply_peer(tag(k, &mut buf), u32::MAX);
    }
    let mut n = 1u64 << 41;
    g.bench_function("new_key_into_keys_in_debt_100k", |b| {
        b.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    n += 1;
                    assert!(admit(&d, n), "a new key was refused");
                },
                || {
                    black_box(d.peer_report(10_000));
                },
            )
        })
    });
    // Keys seen twice, into a table 90 % in debt, then 100 %.
    for (name, every) in [
        ("touch_twice_into_90pct_in_debt_100k", 10),
        ("touch_twice_into_keys_in_debt_100k", u64::MAX),
    ] {
        let d = in_debt(every);
        let mut i = 0u64;
        let mut n = 1u64 << 42;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                periods(
                    iters,
                    |_| {
                        i += 1;
                        n += i & 1;
                        assert!(admit(&d, n), "a new key was refused");
                    },
                    || {
                        black_box(d.peer_report(10_000));
                    },
                )
            })
        });
    }
    g.finish();
}

/// A full table whose keys are in debt, but every `every`-th one idle.
fn in_debt(every: u64) -> L {
    let d = limiter();
    for k in 0..KEYS as u64 {
        let mut buf = [0u8; 24];
        if k % every != 0 || every == u64::MAX {
            d.apply_peer(tag(k, &mut buf), u32::MAX);
        } else {
            admit(&d, k);
        }
    }
    black_box(d.peer_report(10_000));
    d
}

fn daemon(c: &mut Criterion) {
    let mut g = c.benchmark_group("dthrottle_flood");
    let b = Buckets::new(Config {
        burst: 1_000_000,
        rate: 1e6,
        max_tags: KEYS,
        max_report_tags: 10_000,
    });
    let decide = |n: u64| {
        let mut buf = [0u8; 24];
        b.decide(tag(n, &mut buf))
    };
    for n in 0..KEYS as u64 {
        decide(n);
    }
    let mut i = 0u64;
    g.bench_function("live_tag_100k", |bn| {
        bn.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    i += 1;
                    black_box(decide(live(i)));
                },
                || {},
            )
        })
    });
    let mut n = 1u64 << 40;
    g.bench_function("new_tag_flood_100k", |bn| {
        bn.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    n += 1;
                    assert_eq!(decide(n), Decision::Ok, "a new tag was refused");
                },
                || {
                    black_box(b.report());
                },
            )
        })
    });
    // Tags seen twice (one decision per iteration, half of them new tags).
    let mut i = 0u64;
    let mut n = 1u64 << 41;
    g.bench_function("touch_twice_tag_flood_100k", |bn| {
        bn.iter_custom(|iters| {
            periods(
                iters,
                |_| {
                    i += 1;
                    n += i & 1;
                    black_box(decide(n));
                },
                || {
                    black_box(b.report());
                },
            )
        })
    });
    g.finish();
}

criterion_group!(benches, peered, daemon);
criterion_main!(benches);
