//! Heap bytes per key at the bound (1 M keys, 16-byte state), and a churn
//! attack: 10 M distinct keys at full speed into the full table, on one
//! thread and then on two, with memory sampled throughout and decision time
//! compared with the steady state (live keys only).
//!
//! Run: `cargo bench -p keyed --bench memory`. Prints its figures; not timed
//! by criterion (the decision times are medians over batches of 1 000).

#![forbid(unsafe_code)]

mod common;

use std::alloc::System;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::{decide, fill, key, live_keys, shuffled, KEYS, S};
use keyed::KeyTable;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed, process-wide.
fn heap() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize + s.bytes_reallocated
}

const BATCH: usize = 1_000;

/// Nanoseconds per decision in each batch of `BATCH`, `batches` batches of
/// `op(i)` with `i` counting from `first`.
fn batches(batches: usize, first: u64, op: impl Fn(u64)) -> Vec<f64> {
    let mut out = Vec::with_capacity(batches);
    let mut i = first;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            op(i);
            i += 1;
        }
        out.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    out
}

/// The same on `threads` threads at once; all their batches together.
fn batches_on(threads: u64, n: usize, op: impl Fn(u64, u64) + Send + Sync + 'static) -> Vec<f64> {
    let op = Arc::new(op);
    let start = Arc::new(std::sync::Barrier::new(threads as usize));
    let hs: Vec<_> = (0..threads)
        .map(|th| {
            let (op, start) = (op.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                batches(n, 0, |i| op(th, i))
            })
        })
        .collect();
    hs.into_iter()
        .flat_map(|h| h.join().expect("bench thread panicked"))
        .collect()
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q) as usize]
}

fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        // `cargo test --benches` / `cargo bench -- --list`: nothing to check.
        return;
    }
    let base = heap();
    let t = Arc::new(KeyTable::<S>::new(KEYS));
    let empty = heap() - base;
    let started = Instant::now();
    let mut next = fill(&t);
    let fill_time = started.elapsed();
    let at_bound = heap() - base;
    println!(
        "table of {KEYS} keys, state {} B: {at_bound} B at the bound = {:.1} B/key \
         (empty table: {empty} B; filled in {fill_time:.2?} with {next} keys offered)",
        std::mem::size_of::<S>(),
        at_bound as f64 / KEYS as f64,
    );

    let keys = live_keys(&t);
    // The list is the bench's, not the table's: left out of the figures below.
    let list = (keys.capacity() * std::mem::size_of::<u64>()) as isize;
    let (t1, k1) = (t.clone(), keys.clone());
    let mut steady1 = batches(2_000, 0, move |i| decide(&t1, k1[i as usize % k1.len()]));
    let (t2, k2) = (t.clone(), keys.clone());
    let mut steady2 = batches_on(2, 2_000, move |th, i| {
        let j = (i as usize + th as usize * k2.len() / 2) % k2.len();
        decide(&t2, k2[j]);
    });
    let evicted = t.evicted();
    assert_eq!(
        (t.len(), t.evicted()),
        (KEYS, evicted),
        "steady state: live keys only"
    );
    let s1 = quantile(&mut steady1, 0.5);
    let s2 = quantile(&mut steady2, 0.5);
    println!("steady state (live keys), median ns/decision: 1 thread {s1:.0}, 2 threads {s2:.0}");

    // Churn: 10 M new keys, on 1 thread, then on 2 threads (5 M each).
    for threads in [1u64, 2] {
        let per_thread = 10_000_000 / threads as usize / BATCH;
        let before = heap() - base - list;
        // Sampled every 100 000 decisions per thread; includes the bench's
        // own per-batch result vectors (a few tens of KB).
        let peak = Arc::new(AtomicIsize::new(before));
        let (tc, pk) = (t.clone(), peak.clone());
        let first = next;
        let started = Instant::now();
        let mut times = batches_on(threads, per_thread, move |th, i| {
            decide(&tc, key(first + th * (1 << 40) + i));
            if i % 100_000 == 0 {
                pk.fetch_max(heap() - base - list, Ordering::Relaxed);
            }
        });
        let wall = started.elapsed();
        next += 1 << 42;
        let (median, p99) = (quantile(&mut times, 0.5), quantile(&mut times, 0.99));
        drop(times);
        let after = heap() - base - list;
        let peak = peak.load(Ordering::Relaxed).max(after);
        let steady = if threads == 1 { s1 } else { s2 };
        println!(
            "churn, {threads} thread(s), 10 M distinct keys in {wall:.2?}: median ns/decision {median:.0} \
             (p99 of batches {p99:.0}; {:.1}x steady state); table heap {before} B before, \
             {after} B after ({:+} B), {peak} B peak sampled; keys {}; evicted {}",
            median / steady,
            after - before,
            t.len(),
            t.evicted(),
        );
    }

    // The clients during an attack: the keys of before that are still
    // live (the attack's start took probation, and main gave up its least
    // recently used keys for the clients that were in probation then), on
    // one thread, while the other churns new keys. Clients' states have
    // been updated many times (`tat` > 1 000), attack keys once.
    drop(keys);
    let mut clients = Vec::with_capacity(KEYS);
    t.for_each(|k, s| {
        if s.tat > 1_000 {
            clients.push(k);
        }
    });
    println!(
        "clients (keys live before the churn) still live after 20 M attack keys: {} of {KEYS}",
        clients.len()
    );
    let clients = shuffled(clients);
    let (tm, km) = (t.clone(), clients.clone());
    let first = next;
    let evicted = t.evicted();
    let per_thread = 2_000;
    let times = batches_on(2, per_thread, move |th, i| {
        if th == 0 {
            decide(&tm, key(first + i));
        } else {
            decide(&tm, km[i as usize % km.len()]);
        }
    });
    let mut attack: Vec<f64> = times[..per_thread].to_vec();
    let mut client: Vec<f64> = times[per_thread..].to_vec();
    let client_inserts = t.evicted() - evicted - (per_thread * BATCH) as u64;
    let (c, a) = (quantile(&mut client, 0.5), quantile(&mut attack, 0.5));
    println!(
        "one thread churning, the other deciding for live clients, median ns/decision: \
         clients {c:.0} ({:.1}x steady state with 2 threads; {client_inserts} of their \
         {} decisions found the key evicted), attack keys {a:.0}",
        c / s2,
        per_thread * BATCH,
    );
    assert!(t.len() <= KEYS);
}
