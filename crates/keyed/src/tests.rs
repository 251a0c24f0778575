//! Model test of eviction and unit tests that need the table's insides
//! (shard of a key, per-shard invariants), by subject (tests/), and the
//! state and helpers they share.

use std::cell::Cell;
use std::collections::HashMap;

use proptest::prelude::*;

use crate::shard::SCAN;
use crate::{Full, KeyState, KeyTable};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct T {
    /// Written by the test: tells a kept state from a fresh one.
    mark: u32,
    busy: bool,
    sticky: bool,
}

thread_local! {
    /// `busy` calls on this thread: the cost of eviction searches.
    static BUSY_CALLS: Cell<u64> = const { Cell::new(0) };
}

fn busy_calls() -> u64 {
    BUSY_CALLS.with(Cell::get)
}

impl KeyState for T {
    fn busy(&self, _now: u64) -> bool {
        BUSY_CALLS.with(|c| c.set(c.get() + 1));
        self.busy
    }

    fn sticky(&self, _now: u64) -> bool {
        self.sticky
    }
}

#[derive(Debug, Clone)]
enum Act {
    Touch,
    Mark(u32),
    Busy(bool),
    Sticky(bool),
}

#[derive(Debug, Clone)]
enum Op {
    With(u16, Act),
    Get(u16, Act),
}

fn apply(s: &mut T, a: &Act) {
    match a {
        Act::Touch => {}
        Act::Mark(m) => s.mark = *m,
        Act::Busy(b) => s.busy = *b,
        Act::Sticky(b) => s.sticky = *b,
    }
}

/// Spreads the test's small key numbers over all 64 bits, as hashes are.
fn key(k: u16) -> u64 {
    (u64::from(k) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn contents(t: &KeyTable<T>) -> HashMap<u64, T> {
    let mut m = HashMap::new();
    t.for_each(|k, s| {
        assert!(m.insert(k, s.clone()).is_none(), "key listed twice");
    });
    m
}

fn check_shards(t: &KeyTable<T>) {
    for p in t.shards.iter() {
        p.shard.lock().check();
    }
}

fn shard_cap(t: &KeyTable<T>, i: usize) -> usize {
    let n = t.shards.len();
    t.capacity / n + usize::from(i < t.capacity % n)
}

/// Fills a one-shard table of `cap` keys, each marked with `f`.
fn full_table(cap: u16, f: impl Fn(&mut T)) -> KeyTable<T> {
    let t = KeyTable::<T>::with_shards(usize::from(cap), 1);
    for k in 0..cap {
        t.with(key(k), |s| f(s)).unwrap();
    }
    // Touched again: all in main.
    for k in 0..cap {
        t.with(key(k), |_| ()).unwrap();
    }
    t
}

mod floods;
mod model;
mod shards;
