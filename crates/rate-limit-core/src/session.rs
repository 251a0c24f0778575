//! `--conntrack`: what a client session holds across its transactions (its
//! HTTP/2 streams): the slot of each limiter that admitted it, the limiters
//! whose dry run let it through, and its transactions waiting for a slot.
//! Its transactions may run on several threads: each part has its own lock;
//! `waiting`'s is taken before a queue's, never after, and none is held
//! while a transaction is resumed (the caller does that).

use limits::{Ticket, Waiter};
use parking_lot::Mutex;

use crate::mates::Mates;

/// A session's slots, `H` being what holds one (its drop gives it back) and
/// `W` a waiting transaction.
pub struct SessionSlots<H, W: Waiter> {
    /// By limiter id; `None`: admitted by a limiter without slots.
    held: Mutex<Vec<(u64, Option<H>)>>,
    /// Its transactions waiting for a slot, to pass with the one that gets it.
    waiting: Mutex<Mates<W>>,
    /// Limiters whose dry run let it through as a would-be waiter: it
    /// passes them only while they are still in a dry run.
    dry: Mutex<Vec<u64>>,
}

impl<H, W: Waiter> Default for SessionSlots<H, W> {
    fn default() -> Self {
        SessionSlots {
            held: Mutex::default(),
            waiting: Mutex::default(),
            dry: Mutex::default(),
        }
    }
}

impl<H, W: Waiter> SessionSlots<H, W> {
    /// Holds a slot of any limiter.
    pub fn holds_any(&self) -> bool {
        self.held.lock().iter().any(|(_, h)| h.is_some())
    }

    pub fn admitted(&self, limiter: u64) -> bool {
        self.held.lock().iter().any(|(r, _)| *r == limiter)
    }

    /// Let through by `limiter`'s dry run (see `dry`).
    pub fn dry_admitted(&self, limiter: u64) -> bool {
        self.dry.lock().contains(&limiter)
    }

    pub fn keep_dry(&self, limiter: u64) {
        let mut v = self.dry.lock();
        if !v.contains(&limiter) {
            v.push(limiter);
        }
    }

    /// Keeps `held` as the session's slot of `limiter`, unless it has one.
    pub fn keep(&self, limiter: u64, held: Option<H>) {
        let mut v = self.held.lock();
        if !v.iter().any(|(r, _)| *r == limiter) {
            v.push((limiter, held));
            return;
        }
        // Two transactions of one session raced for a slot: give the second
        // back, outside the lock (dropping it may admit a waiter).
        drop(v);
        drop(held);
    }

    /// Notes a transaction waiting in `limiter`'s queue (before it looks at
    /// `admitted` once more: whoever keeps the slot after that look finds
    /// it in `take_waiting`), unless the session tracks too many.
    pub fn add_waiting(&self, limiter: u64, t: &Ticket<W>) {
        self.waiting.lock().add(limiter, t);
    }

    /// Takes the session's waiters out of `limiter`'s queue (after the
    /// session kept its slot there): O(its waiters).
    pub fn take_waiting(&self, limiter: u64) -> Vec<W> {
        self.waiting.lock().take(limiter)
    }
}

#[cfg(test)]
mod tests;
