//! Admission of uncached requests, lock-free.
//!
//! A [`Gate`] counts the uncached requests of one rule in flight and refuses
//! entry at `max` with a compare-and-swap, so it never overshoots (the
//! original plugin incremented first and backed out, which let the count and
//! its high-water mark pass `max` briefly). It also keeps the per-interval
//! figures of `throttle.log`: the high-water mark (an atomic max) and the
//! 503 and stale counts (swapped to zero when a line is written).
//!
//! A [`Ticket`] is one transaction's hold on a gate: entered at most once,
//! left exactly once (explicitly or on drop), however often the transaction's
//! hooks fire.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One rule's admission state.
#[derive(Debug)]
pub struct Gate {
    /// Changeable live ([`Gate::set_max`]).
    max: AtomicU64,
    in_flight: AtomicU64,
    high: AtomicU64,
    unavailable: AtomicU64,
    stale: AtomicU64,
}

/// The figures of one statistics interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    /// Most uncached requests in flight at once.
    pub high_water: u64,
    /// 503s answered.
    pub unavailable: u64,
    /// Responses served stale.
    pub stale: u64,
}

impl Gate {
    pub fn new(max: u32) -> Gate {
        Gate {
            max: AtomicU64::new(u64::from(max)),
            in_flight: AtomicU64::new(0),
            high: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            stale: AtomicU64::new(0),
        }
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Changes `max` on a live gate. Raising it admits the next entries at
    /// once; lowering it preempts nobody: those in flight stay until they
    /// leave, and nobody enters until fewer than the new `max` are in flight.
    pub fn set_max(&self, max: u32) {
        self.max.store(u64::from(max), Ordering::Relaxed);
    }

    /// Enters if fewer than `max` are in flight.
    pub fn try_enter(&self) -> bool {
        let max = self.max();
        match cas_update(&self.in_flight, |n| (n < max).then_some(n + 1)) {
            Ok(prev) => {
                self.high.fetch_max(prev + 1, Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }

    /// Leaves; never goes below zero (a stray leave is a bug, not a wrap-around).
    pub fn leave(&self) {
        let _ = cas_update(&self.in_flight, |n| n.checked_sub(1));
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn note_unavailable(&self) {
        self.unavailable.fetch_add(1, Ordering::Relaxed);
    }

    pub fn note_stale(&self) {
        self.stale.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures since the previous call, resetting them: the counts restart
    /// at zero and the high-water mark at the number in flight now.
    pub fn take_interval(&self) -> Interval {
        let high_water = self.high.swap(self.in_flight(), Ordering::AcqRel);
        // An entry between the load and the swap would be lost from the new
        // interval's mark; raising it again closes most of that window.
        self.high.fetch_max(self.in_flight(), Ordering::AcqRel);
        Interval {
            high_water,
            unavailable: self.unavailable.swap(0, Ordering::Relaxed),
            stale: self.stale.swap(0, Ordering::Relaxed),
        }
    }
}

/// `f` applied with a compare-and-swap: `Ok(previous)` once stored,
/// `Err(current)` when `f` declines. What `AtomicU64::fetch_update` does; it
/// is deprecated from 1.99 and its successor `try_update` needs 1.95 (MSRV
/// is 1.85). Lock-free: a retry means another thread's swap succeeded.
fn cas_update(a: &AtomicU64, mut f: impl FnMut(u64) -> Option<u64>) -> Result<u64, u64> {
    let mut cur = a.load(Ordering::Acquire);
    loop {
        let new = f(cur).ok_or(cur)?;
        match a.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(prev) => return Ok(prev),
            Err(actual) => cur = actual,
        }
    }
}

/// What [`Ticket::enter`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Newly counted against the gate.
    Entered,
    /// Already counted (a hook fired again).
    AlreadyIn,
    /// The gate is full.
    Refused,
}

/// A transaction's hold on a gate; leaves on drop if still in. `G` is a
/// pointer to the gate or to something holding one (an `Arc` of the rule).
#[derive(Debug)]
pub struct Ticket<G>
where
    G: Deref,
    G::Target: AsRef<Gate>,
{
    gate: G,
    held: AtomicBool,
}

impl<G> Ticket<G>
where
    G: Deref,
    G::Target: AsRef<Gate>,
{
    pub fn new(gate: G) -> Self {
        Ticket {
            gate,
            held: AtomicBool::new(false),
        }
    }

    pub fn gate(&self) -> &G {
        &self.gate
    }

    pub fn holds(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    pub fn enter(&self) -> Entry {
        if self
            .held
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Entry::AlreadyIn;
        }
        if (*self.gate).as_ref().try_enter() {
            Entry::Entered
        } else {
            self.held.store(false, Ordering::Release);
            Entry::Refused
        }
    }

    /// Leaves the gate if in it; true if this call left.
    pub fn leave(&self) -> bool {
        let left = self.held.swap(false, Ordering::AcqRel);
        if left {
            (*self.gate).as_ref().leave();
        }
        left
    }
}

impl<G> Drop for Ticket<G>
where
    G: Deref,
    G::Target: AsRef<Gate>,
{
    fn drop(&mut self) {
        self.leave();
    }
}

impl AsRef<Gate> for Gate {
    fn as_ref(&self) -> &Gate {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn admits_up_to_max() {
        let g = Gate::new(2);
        assert!(g.try_enter() && g.try_enter());
        assert!(!g.try_enter());
        g.leave();
        assert!(g.try_enter());
        assert_eq!(g.in_flight(), 2);
        let z = Gate::new(0);
        assert!(!z.try_enter());
    }

    #[test]
    fn max_changes_live() {
        let g = Gate::new(1);
        assert!(g.try_enter());
        assert!(!g.try_enter());
        g.set_max(3);
        assert_eq!(g.max(), 3);
        assert!(g.try_enter() && g.try_enter(), "raising admits at once");
        assert!(!g.try_enter());
        g.set_max(1);
        assert_eq!(g.in_flight(), 3, "lowering preempts nobody");
        g.leave();
        assert!(!g.try_enter(), "2 in flight, max 1");
        g.leave();
        g.leave();
        assert!(g.try_enter());
        assert!(!g.try_enter());
    }

    #[test]
    fn leave_never_underflows() {
        let g = Gate::new(1);
        g.leave();
        assert_eq!(g.in_flight(), 0);
        assert!(g.try_enter());
    }

    #[test]
    fn tickets_enter_once_and_leave_once() {
        let g = Arc::new(Gate::new(1));
        let t = Ticket::new(g.clone());
        assert_eq!(t.enter(), Entry::Entered);
        assert_eq!(t.enter(), Entry::AlreadyIn);
        assert_eq!(g.in_flight(), 1);
        let other = Ticket::new(g.clone());
        assert_eq!(other.enter(), Entry::Refused);
        assert!(!other.holds());
        drop(other);
        assert_eq!(g.in_flight(), 1, "a refused ticket must not leave");
        assert!(t.leave());
        assert!(!t.leave());
        drop(t);
        assert_eq!(g.in_flight(), 0);
        let t = Ticket::new(g.clone());
        assert_eq!(t.enter(), Entry::Entered);
        drop(t);
        assert_eq!(g.in_flight(), 0, "drop leaves");
    }

    #[test]
    fn intervals_reset() {
        let g = Gate::new(5);
        for _ in 0..3 {
            assert!(g.try_enter());
        }
        g.leave();
        g.note_unavailable();
        g.note_stale();
        g.note_stale();
        assert_eq!(
            g.take_interval(),
            Interval {
                high_water: 3,
                unavailable: 1,
                stale: 2
            }
        );
        // The mark restarts from the 2 still in flight.
        assert_eq!(
            g.take_interval(),
            Interval {
                high_water: 2,
                unavailable: 0,
                stale: 0
            }
        );
        g.leave();
        g.leave();
        assert_eq!(g.take_interval().high_water, 2);
        assert_eq!(g.take_interval().high_water, 0);
    }

    #[test]
    fn concurrent_entries_never_exceed_max() {
        const THREADS: usize = 8;
        let g = Arc::new(Gate::new(3));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (g, barrier) = (g.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut admitted = 0u64;
                    for _ in 0..20_000 {
                        let t = Ticket::new(&*g);
                        if t.enter() == Entry::Entered {
                            admitted += 1;
                            assert!(g.in_flight() <= 3);
                        } else {
                            g.note_unavailable();
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
        assert_eq!(g.in_flight(), 0);
        let iv = g.take_interval();
        assert!(iv.high_water >= 1 && iv.high_water <= 3, "{iv:?}");
        assert_eq!(admitted + iv.unavailable, (THREADS * 20_000) as u64);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Enter(usize),
        Leave(usize),
        Drop(usize),
        Take,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..6usize).prop_map(Op::Enter),
            (0..6usize).prop_map(Op::Leave),
            (0..6usize).prop_map(Op::Drop),
            Just(Op::Take),
        ]
    }

    proptest! {
        /// Against a model: in-flight = tickets held, never above max; the
        /// high-water mark is the model's maximum since the last take.
        #[test]
        fn matches_a_model(max in 0u32..4, ops in proptest::collection::vec(op(), 0..60)) {
            let g = Arc::new(Gate::new(max));
            let mut tickets: Vec<Option<Ticket<Arc<Gate>>>> = (0..6).map(|_| None).collect();
            let mut held = [false; 6];
            let mut high = 0u64;
            for op in ops {
                match op {
                    Op::Enter(i) => {
                        let t = tickets[i].get_or_insert_with(|| Ticket::new(g.clone()));
                        let n = held.iter().filter(|h| **h).count() as u64;
                        let want = if held[i] { Entry::AlreadyIn }
                            else if n < u64::from(max) { Entry::Entered } else { Entry::Refused };
                        prop_assert_eq!(t.enter(), want);
                        if want == Entry::Entered { held[i] = true; }
                    }
                    Op::Leave(i) => {
                        let left = tickets[i].as_ref().map(|t| t.leave()).unwrap_or(false);
                        prop_assert_eq!(left, held[i]);
                        held[i] = false;
                    }
                    Op::Drop(i) => { tickets[i] = None; held[i] = false; }
                    Op::Take => {
                        let n = held.iter().filter(|h| **h).count() as u64;
                        prop_assert_eq!(g.take_interval().high_water, high);
                        high = n;
                    }
                }
                let n = held.iter().filter(|h| **h).count() as u64;
                high = high.max(n);
                prop_assert_eq!(g.in_flight(), n);
                prop_assert!(n <= u64::from(max));
            }
        }
    }
}
