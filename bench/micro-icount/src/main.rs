//! The single-thread operations of the criterion micro-benchmarks
//! (crates/limits, keyed, rate-limit-core, throttle-core `benches/`), each
//! repeated [`N`] times inside its own never-inlined function, so that
//! callgrind's inclusive cost of that function divided by `N` is the
//! instructions of one operation. Set-up (tables filled, buckets made)
//! happens outside those functions and is not counted.
//!
//! Not meant to be run alone: `ats-bench micro-icount` runs it under
//! `valgrind --tool=callgrind`, reads the `op <id> <function> <N>` lines it
//! prints and compares the counts with `bench/micro-icount/baseline.tsv`.
//!
//! The "2threads" criterion variants are left out: what they measure is
//! cache-line transfer between cores, which costs time, not instructions
//! (callgrind runs threads one at a time).

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use keyed::{KeyState, KeyTable};
use limits::{
    Budget, Clock, FairConfig, Gcra, MonotonicClock, Permit, Slots, Waiter, NANOS_PER_SEC,
};
use optspec::files::FsFiles;
use rate_limit_core::{Admission, KeyedLimiter, Limits, Options, RuleLimiter};
use throttle_core::params;
use throttle_core::{Entry, Gate, Ticket};

/// Repetitions per operation: enough that the loop's own handful of
/// instructions and one-off effects (first-touch, a table's first eviction)
/// vanish in the average, few enough to run in seconds under callgrind.
const N: u64 = 10_000;

/// Far above what is held at once: never refuses.
const HIGH: u32 = 1_000_000;
/// Keys in the keyed tables. Fewer than the criterion benches' 1 M (which
/// measure cache misses, invisible to an instruction count) so that filling
/// them takes ~2 s under callgrind; the table is just as full (at its bound).
const KEYS: usize = 100_000;

struct GiveBack;
impl Waiter for GiveBack {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        drop(permit);
        Ok(())
    }
}

struct Nobody;
impl Waiter for Nobody {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

#[derive(Default)]
struct S {
    tat: u64,
    active: u32,
    waiting: u32,
}
impl KeyState for S {
    fn busy(&self, _now: u64) -> bool {
        self.active != 0 || self.waiting != 0
    }
}

/// SplitMix64, as the keyed benches spread their keys.
fn key(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn decide(t: &KeyTable<S>, k: u64) {
    let r = t.with(k, |s| {
        s.tat = s.tat.wrapping_add(1_000);
        s.tat
    });
    black_box(r).ok();
}

#[inline(never)]
fn slots_acquire_release(s: &Arc<Slots<GiveBack>>) {
    for _ in 0..N {
        drop(black_box(s.try_acquire().expect("high limit")));
    }
}

#[inline(never)]
fn queue_push_pop_handoff(s: &Arc<Slots<GiveBack>>) {
    for _ in 0..N {
        let holder = s.try_acquire().expect("free between iterations");
        let ticket = s.enqueue(GiveBack);
        drop(holder);
        black_box(ticket);
    }
}

#[inline(never)]
fn fair_acquire_release(s: &Arc<Slots<GiveBack>>) {
    for _ in 0..N {
        drop(black_box(
            s.try_acquire_flow(1).permit().expect("high limit"),
        ));
    }
}

#[inline(never)]
fn fair_push_pop_handoff(s: &Arc<Slots<GiveBack>>) {
    for _ in 0..N {
        let holder = s
            .try_acquire_flow(1)
            .permit()
            .expect("free between iterations");
        let ticket = s.enqueue_flow(2, GiveBack);
        drop(holder);
        black_box(ticket);
    }
}

#[inline(never)]
fn queue_enqueue_cancel(s: &Arc<Slots<GiveBack>>) {
    for _ in 0..N {
        let ticket = s.enqueue(GiveBack);
        black_box(ticket.cancel().expect("still queued: the slot is held"));
    }
}

#[inline(never)]
fn gcra_check_conforming(g: &Gcra, mut now: u64) {
    for _ in 0..N {
        now += g.interval();
        black_box(g.try_acquire(black_box(now))).expect("at the rate");
    }
}

#[inline(never)]
fn gcra_check_denied(g: &Gcra, t: u64) {
    for _ in 0..N {
        black_box(g.try_acquire(black_box(t))).expect_err("empty");
    }
}

#[inline(never)]
fn gcra_check_with_clock(g: &Gcra) {
    for _ in 0..N {
        let _ = black_box(g.try_acquire(MonotonicClock.now()));
    }
}

#[inline(never)]
fn budget_take_return(b: &Arc<Budget>) {
    for _ in 0..N {
        drop(black_box(b.try_take().expect("never exhausted")));
    }
}

#[inline(never)]
fn clock_monotonic_now() {
    for _ in 0..N {
        black_box(MonotonicClock.now());
    }
}

#[inline(never)]
fn throttle_ticket_enter_leave(gate: &Arc<Gate>) {
    for _ in 0..N {
        let ticket = Ticket::new(gate.clone());
        assert_eq!(ticket.enter(), Entry::Entered);
        drop(black_box(ticket));
    }
}

#[inline(never)]
fn throttle_params_parse(args: &[&str], dir: &Path) {
    for _ in 0..N {
        black_box(params::parse(black_box(args), dir, &FsFiles)).expect("valid");
    }
}

#[inline(always)]
fn options_parse(from: &str, args: &[&str]) {
    for _ in 0..N {
        black_box(Options::parse(black_box(from), black_box(args))).expect("valid");
    }
}

/// rate_limit.so's per-request decision on an unkeyed `--limit` rule, as in
/// the load bench: admitted with a permit, which is dropped (TXN_CLOSE).
#[inline(never)]
fn admission_limit(l: &RuleLimiter<Nobody>) {
    for _ in 0..N {
        match l.admit() {
            Admission::Go(p) => drop(black_box(p)),
            _ => panic!("the high limit admits"),
        }
    }
}

/// A keyed rate-only rule's whole decision (hash of the address bytes,
/// table lookup, GCRA step), as `keyed_admission/1M_keys_1_thread`.
#[inline(never)]
fn keyed_admission(l: &KeyedLimiter<Nobody>, mut i: u32) {
    for _ in 0..N {
        i = i.wrapping_add(7919);
        let a = (i % KEYS as u32).wrapping_mul(2_654_435_761).to_be_bytes();
        let k = l.key(&[0, 0, 4, a[0], a[1], a[2], a[3]]);
        assert!(matches!(l.admit(k, &[]), Admission::Go(_)));
    }
}

/// The same decision for addresses never seen (a churn attack): each one
/// inserts a key and evicts an idle one, as `keyed_admission/new_key_at_bound_1_thread`.
#[inline(never)]
fn keyed_admission_new_key(l: &KeyedLimiter<Nobody>, first: u32) {
    for n in 0..N as u32 {
        let a = (first + n).wrapping_mul(2_654_435_761).to_be_bytes();
        let k = l.key(&[0, 0, 4, a[0], a[1], a[2], a[3]]);
        assert!(matches!(l.admit(k, &[]), Admission::Go(_)));
    }
}

#[inline(never)]
fn keyed_with_live_key(t: &KeyTable<S>, keys: &[u64]) {
    for i in 0..N as usize {
        decide(t, keys[(i * 7919) % keys.len()]);
    }
}

#[inline(never)]
fn churn_new_key_at_bound(t: &KeyTable<S>, first: u64) {
    for n in 0..N {
        decide(t, key(first + n));
    }
}

/// Prints the line `ats-bench micro-icount` looks for.
fn op<F>(id: &str, f: &F) {
    println!("op {id} {} {N}", std::any::type_name_of_val(f));
}

fn main() {
    let s = Slots::<GiveBack>::new(HIGH);
    op("slots/acquire_release", &slots_acquire_release);
    slots_acquire_release(&s);

    let q = Slots::<GiveBack>::new(1);
    op("queue/push_pop_handoff", &queue_push_pop_handoff);
    queue_push_pop_handoff(&q);
    let holder = q.try_acquire().expect("free");
    op("queue/enqueue_cancel", &queue_enqueue_cancel);
    queue_enqueue_cancel(&q);
    drop(holder);

    let f = Slots::<GiveBack>::fair(HIGH, FairConfig::default());
    op("fair/acquire_release", &fair_acquire_release);
    fair_acquire_release(&f);
    let f = Slots::<GiveBack>::fair(1, FairConfig::default());
    op("fair/push_pop_handoff", &fair_push_pop_handoff);
    fair_push_pop_handoff(&f);

    let bucket = Gcra::per_second(1000.0, 10);
    op("gcra/check_conforming", &gcra_check_conforming);
    gcra_check_conforming(&bucket, 10 * NANOS_PER_SEC);
    let empty = Gcra::per_second(1.0, 1);
    empty
        .try_acquire(10 * NANOS_PER_SEC)
        .expect("a new bucket is full");
    op("gcra/check_denied", &gcra_check_denied);
    gcra_check_denied(&empty, 10 * NANOS_PER_SEC);
    op("gcra/check_with_clock", &gcra_check_with_clock);
    gcra_check_with_clock(&Gcra::new(1, 1_000_000));

    op("budget/take_return", &budget_take_return);
    budget_take_return(&Budget::new(HIGH));
    op("clock/monotonic_now", &clock_monotonic_now);
    clock_monotonic_now();

    op("throttle/ticket_enter_leave", &throttle_ticket_enter_leave);
    throttle_ticket_enter_leave(&Arc::new(Gate::new(HIGH)));
    op("throttle/params_parse", &throttle_params_parse);
    throttle_params_parse(
        &["max:2000", "stale:3600", "statfreq:10000", "id:example-01"],
        Path::new("/etc/trafficserver"),
    );

    // One parser, two inputs: a wrapper function per input gives each its
    // own symbol.
    op("options/parse_typical", &options_parse_typical);
    options_parse_typical();
    op("options/parse_split_rate", &options_parse_split_rate);
    options_parse_split_rate();

    let limits = Limits {
        limit: Some(HIGH),
        rate: None,
        queue: 1000,
        maxage: None,
        block: None,
        auto: None,
    };
    op("admission/limit_unkeyed", &admission_limit);
    admission_limit(&RuleLimiter::new(limits, MonotonicClock));

    let keyed_limits = Limits {
        limit: None,
        rate: Some((1e6, 1_000_000)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let l: KeyedLimiter<Nobody> = KeyedLimiter::new(keyed_limits, KEYS, MonotonicClock);
    for i in 0..KEYS as u32 {
        let a = i.wrapping_mul(2_654_435_761).to_be_bytes();
        let k = l.key(&[0, 0, 4, a[0], a[1], a[2], a[3]]);
        let _ = l.admit(k, &[]);
    }
    op("keyed_admission/100k_keys_1_thread", &keyed_admission);
    keyed_admission(&l, 0);
    op("keyed_admission/new_key_at_bound", &keyed_admission_new_key);
    keyed_admission_new_key(&l, KEYS as u32);

    let table = KeyTable::<S>::new(KEYS);
    let mut n = 0;
    while table.len() < table.capacity() {
        decide(&table, key(n));
        n += 1;
    }
    let mut live = Vec::with_capacity(table.len());
    table.for_each(|k, _| live.push(k));
    op("keyed/with_live_key_100k", &keyed_with_live_key);
    keyed_with_live_key(&table, &live);
    op("churn/new_key_at_bound", &churn_new_key_at_bound);
    churn_new_key_at_bound(&table, 1 << 40);
}

#[inline(never)]
fn options_parse_typical() {
    let typical = [
        "--limit=100",
        "--queue=1000",
        "--maxage=5000",
        "--header=X-RateLimit-Delay",
        "--retry=1",
    ];
    options_parse("http://www.example.com/", &typical);
}

#[inline(never)]
fn options_parse_split_rate() {
    let split = [
        "--limit", "100", "--rate", "250.5", "--burst", "50", "--tag", "api",
    ];
    options_parse("http://api.example.com:8080/v1/", &split);
}
