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

/// `max:auto`: the learned max governs the gate.
impl adaptive::Governed for Gate {
    #[inline]
    fn in_flight(&self) -> u32 {
        u32::try_from(Gate::in_flight(self)).unwrap_or(u32::MAX)
    }

    #[inline]
    fn limit(&self) -> u32 {
        u32::try_from(self.max()).unwrap_or(u32::MAX)
    }

    fn set_limit(&self, limit: u32) {
        self.set_max(limit);
    }
}

impl AsRef<Gate> for Gate {
    fn as_ref(&self) -> &Gate {
        self
    }
}

#[cfg(test)]
mod tests;
