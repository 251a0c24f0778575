//! What both benches share: the 16-byte state of the targets, keys, and a
//! table filled to its bound.

#![allow(dead_code)] // each bench uses part of it

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use keyed::{KeyState, KeyTable};

/// The state the targets are stated for: a GCRA bucket and two counters.
#[derive(Default)]
pub struct S {
    pub tat: u64,
    pub active: u32,
    pub waiting: u32,
}

impl KeyState for S {
    fn busy(&self, _now: u64) -> bool {
        self.active != 0 || self.waiting != 0
    }
}

pub const KEYS: usize = 1_000_000;

/// The n-th distinct key, spread like a table hash (SplitMix64).
pub fn key(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What a decision does to the state: a bucket update.
pub fn decide(t: &KeyTable<S>, k: u64) {
    let r = t.with(k, |s| {
        s.tat = s.tat.wrapping_add(1_000);
        s.tat
    });
    std::hint::black_box(r).ok();
}

/// Fills `t` until it holds its bound (shards fill unevenly, so a few more
/// keys than the bound are offered); returns the next unused key number.
pub fn fill(t: &KeyTable<S>) -> u64 {
    let mut n = 0;
    while t.len() < t.capacity() {
        decide(t, key(n));
        n += 1;
    }
    n
}

/// The live keys in a random order: walking this list touches keys at
/// random while the list itself is read sequentially (no extra miss).
pub fn live_keys(t: &KeyTable<S>) -> Arc<Vec<u64>> {
    let mut v = Vec::with_capacity(t.len());
    t.for_each(|k, _| v.push(k));
    shuffled(v)
}

/// `v` in a random order (`for_each` lists keys in cell order, which would
/// walk the table sequentially).
pub fn shuffled(mut v: Vec<u64>) -> Arc<Vec<u64>> {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    Arc::new(v)
}

/// Runs `main(iters)` on this thread, timed, while `helper()` runs in a loop
/// on a second thread (started before the clock, stopped after it).
pub fn contended(
    helper: impl FnMut() + Send + 'static,
    main: impl FnOnce() -> Duration,
) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let h = {
        let (stop, started) = (stop.clone(), started.clone());
        let mut helper = helper;
        std::thread::spawn(move || {
            started.wait();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    helper();
                }
            }
        })
    };
    started.wait();
    let d = main();
    stop.store(true, Ordering::Relaxed);
    h.join().expect("the helper thread panicked");
    d
}

/// Times `iters` calls of `op`.
pub fn timed(iters: u64, mut op: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        op();
    }
    t.elapsed()
}
