//! Micro-benchmarks of throttle.so's per-request work: the admission counter
//! (enter and leave through a ticket, as the plugin holds one per uncached
//! transaction) and parameter parsing (once per rule, at config load).
//!
//! Run: `cargo bench -p throttle-core --bench gate`.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use optspec::files::FsFiles;
use throttle_core::params;
use throttle_core::{Entry, Gate, Ticket};

/// Far above what a benchmark holds at once: never refuses.
const HIGH_MAX: u32 = 1_000_000;

/// The plugin's counter path: a ticket on a shared rule (an `Arc`, cloned
/// per transaction), entered once and left when the transaction closes.
fn enter_leave(gate: &Arc<Gate>) {
    let ticket = Ticket::new(gate.clone());
    assert_eq!(
        ticket.enter(),
        Entry::Entered,
        "the high max is never reached"
    );
    drop(black_box(ticket));
}

/// Times `iters` runs of `op` here while a second thread runs it in a loop on
/// the same gate (ATS's two exec threads counting into one rule).
fn contended(gate: &Arc<Gate>, iters: u64) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let helper = {
        let (gate, stop, started) = (gate.clone(), stop.clone(), started.clone());
        std::thread::spawn(move || {
            started.wait();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    enter_leave(&gate);
                }
            }
        })
    };
    started.wait();
    let t = Instant::now();
    for _ in 0..iters {
        enter_leave(gate);
    }
    let elapsed = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    helper.join().expect("the contending thread panicked");
    elapsed
}

fn gate(c: &mut Criterion) {
    let mut g = c.benchmark_group("throttle");
    let gate = Arc::new(Gate::new(HIGH_MAX));
    g.bench_function("ticket_enter_leave", |b| b.iter(|| enter_leave(&gate)));
    g.bench_function("ticket_enter_leave_2threads", |b| {
        b.iter_custom(|iters| contended(&gate, iters))
    });
    g.bench_function("params_parse", |b| {
        let args = ["max:2000", "stale:3600", "statfreq:10000", "id:example-01"];
        let dir = Path::new("/etc/trafficserver");
        b.iter(|| {
            black_box(params::parse(black_box(&args), dir, &FsFiles)).expect("valid parameters")
        })
    });
    g.finish();
    assert_eq!(gate.in_flight(), 0, "tickets leaked");
}

criterion_group!(benches, gate);
criterion_main!(benches);
