//! Micro-benchmarks of the admission primitives, as rate_limit.so uses them
//! on every transaction: a concurrency slot taken and given back, the rate
//! bucket's check, and the FIFO queue's push/pop hand-off.
//!
//! "2threads" variants time this thread while a second thread hammers the
//! same limiter, so the figure includes cache-line contention (the case of
//! ATS's two exec threads admitting into one rule at once).
//!
//! Run: `cargo bench -p limits --bench admission`.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use limits::{
    Budget, Clock, FairConfig, Gcra, MonotonicClock, Permit, Slots, Waiter, NANOS_PER_SEC,
};

/// A waiter that gives its slot straight back: one admission and one release.
struct GiveBack;

impl Waiter for GiveBack {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        drop(permit);
        Ok(())
    }
}

/// Far above what a benchmark can hold at once: the limit is never reached.
const HIGH_LIMIT: u32 = 1_000_000;

/// Times `iters` runs of `op` on this thread while a second thread runs `op`
/// on the same `shared` state in a loop. The helper is started (and known to
/// be running) before the clock starts and stopped after it stops.
fn contended<S: Send + Sync + 'static>(shared: &Arc<S>, op: fn(&S), iters: u64) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let helper = {
        let (shared, stop, started) = (shared.clone(), stop.clone(), started.clone());
        std::thread::spawn(move || {
            started.wait();
            while !stop.load(Ordering::Relaxed) {
                // Check the flag only now and then so the loop is mostly `op`.
                for _ in 0..64 {
                    op(&shared);
                }
            }
        })
    };
    started.wait();
    let t = Instant::now();
    for _ in 0..iters {
        op(shared);
    }
    let elapsed = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    helper.join().expect("the contending thread panicked");
    elapsed
}

fn acquire_release(s: &Arc<Slots<GiveBack>>) {
    let permit = s.try_acquire().expect("the high limit is never reached");
    drop(black_box(permit));
}

fn slots(c: &mut Criterion) {
    let mut g = c.benchmark_group("slots");
    let s = Slots::<GiveBack>::new(HIGH_LIMIT);
    g.bench_function("acquire_release", |b| b.iter(|| acquire_release(&s)));
    // Arc<Arc<..>>: `contended` shares one value; the limiter itself is an Arc.
    let shared = Arc::new(Slots::<GiveBack>::new(HIGH_LIMIT));
    g.bench_function("acquire_release_2threads", |b| {
        b.iter_custom(|iters| contended(&shared, acquire_release, iters))
    });
    g.finish();
    assert_eq!((s.active(), shared.active()), (0, 0), "slots leaked");
}

fn queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue");
    let s = Slots::<GiveBack>::new(1);
    // Full cycle of a queued transaction: the slot is held, a waiter is
    // pushed, the holder releases, the waiter is popped and admitted (and
    // gives the slot back at once).
    g.bench_function("push_pop_handoff", |b| {
        b.iter(|| {
            let holder = s
                .try_acquire()
                .expect("the slot is free between iterations");
            let ticket = s.enqueue(GiveBack);
            drop(holder);
            debug_assert!(!ticket.is_waiting());
            black_box(ticket);
        })
    });
    // A waiter that leaves the queue before its turn (client gone, --maxage).
    let holder = s.try_acquire().expect("the slot is free");
    g.bench_function("enqueue_cancel", |b| {
        b.iter(|| {
            let ticket = s.enqueue(GiveBack);
            black_box(ticket.cancel().expect("still queued: the slot is held"));
        })
    });
    drop(holder);
    g.finish();
    assert_eq!((s.active(), s.waiting()), (0, 0), "queue did not drain");
}

fn check_with_clock(g: &Gcra) {
    let _ = black_box(g.try_acquire(MonotonicClock.now()));
}

fn gcra(c: &mut Criterion) {
    let mut g = c.benchmark_group("gcra");
    // Time advances one interval per check, so every check conforms and
    // takes the compare-and-swap path.
    let bucket = Gcra::per_second(1000.0, 10);
    let mut now = 10 * NANOS_PER_SEC;
    g.bench_function("check_conforming", |b| {
        b.iter(|| {
            now += bucket.interval();
            black_box(bucket.try_acquire(black_box(now))).expect("at the rate: conforms");
        })
    });
    // Over the rate: refused without a write.
    let empty = Gcra::per_second(1.0, 1);
    let t = 10 * NANOS_PER_SEC;
    empty.try_acquire(t).expect("a new bucket is full");
    g.bench_function("check_denied", |b| {
        b.iter(|| black_box(empty.try_acquire(black_box(t))).expect_err("bucket is empty"))
    });
    // As the plugin does it: read the monotonic clock, then check. A 1 ns
    // interval (10^9/s) keeps every check conforming.
    let fast = Arc::new(Gcra::new(1, 1_000_000));
    g.bench_function("check_with_clock", |b| b.iter(|| check_with_clock(&fast)));
    g.bench_function("check_with_clock_2threads", |b| {
        b.iter_custom(|iters| contended(&fast, check_with_clock, iters))
    });
    g.finish();
}

fn misc(c: &mut Criterion) {
    let budget = Budget::new(HIGH_LIMIT);
    c.bench_function("budget/take_return", |b| {
        b.iter(|| {
            drop(black_box(
                budget.try_take().expect("budget is never exhausted"),
            ))
        })
    });
    c.bench_function("clock/monotonic_now", |b| {
        b.iter(|| black_box(MonotonicClock.now()))
    });
}

/// `--fair`: the same two paths through a fair limiter (per-flow queues,
/// round-robin hand-off), the waiter in another flow than the holder.
fn fair(c: &mut Criterion) {
    let mut g = c.benchmark_group("fair");
    let s = Slots::<GiveBack>::fair(HIGH_LIMIT, FairConfig::default());
    g.bench_function("acquire_release", |b| {
        b.iter(|| {
            let p = s.try_acquire_flow(black_box(1)).permit();
            drop(black_box(p.expect("the high limit is never reached")));
        })
    });
    let s = Slots::<GiveBack>::fair(1, FairConfig::default());
    g.bench_function("push_pop_handoff", |b| {
        b.iter(|| {
            let holder = s
                .try_acquire_flow(1)
                .permit()
                .expect("the slot is free between iterations");
            let ticket = s.enqueue_flow(2, GiveBack);
            drop(holder);
            debug_assert!(!ticket.is_waiting());
            black_box(ticket);
        })
    });
    g.finish();
    assert_eq!(
        (s.active(), s.waiting()),
        (0, 0),
        "fair queue did not drain"
    );
}

criterion_group!(benches, slots, queue, fair, gcra, misc);
criterion_main!(benches);
