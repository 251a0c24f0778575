//! A concurrency limit with a FIFO wait queue that hands a freed slot to the
//! oldest waiter at the moment it is freed. Admission, release, grant and
//! cancel race on the same CAS states; the protocol is in three files:
//! admission and release here, the hand-off of a freed slot in
//! `slots/dispatch.rs`, and leaving the queue early (tickets,
//! [`Slots::remove_waiting`]) in `slots/cancel.rs`.
//!
//! - Admission is one CAS on `active` (`try_acquire`), never above `limit`.
//!   While anyone waits, newcomers do not take the fast path: FIFO holds.
//! - A [`Permit`] releases its slot exactly once, on `Drop`.
//! - Releasing runs `dispatch`, which pops the queue head and calls its
//!   [`Waiter::admit`] with a new permit. No lock is held during `admit`,
//!   so it may resume work that re-enters the limiter.
//! - A waiter can leave the queue (timeout, client gone) through its
//!   [`Ticket`]; whoever wins the entry's CAS (grant or cancel) owns it.
//!
//! The queue is a mutex-protected deque, touched only when the limit is
//! reached; the fast paths (acquire and release with nobody waiting) are
//! lock-free. Cancelled entries are skipped when popped and compacted away
//! once they outnumber live ones, so memory follows the live queue.
//!
//! A fair limiter ([`Slots::fair`], see [`crate::fair`]) keeps one queue per
//! flow instead, served round-robin; the paths above leave for it on the
//! `waiting > 0` test they make anyway (its `waiting` carries `FAIR_BIT`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::entry::{Entry, WAITING};
use crate::fair::queue::FairQueue;

mod cancel;
mod dispatch;

/// Something queued for a slot.
pub trait Waiter: Send + Sized + 'static {
    /// The waiter reached the head and a slot is free. Keep the permit for as
    /// long as the work runs; return it (`Err`) to decline (e.g. the client is
    /// gone) and the slot goes to the next waiter.
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>>;
}

/// Always set in a fair limiter's `waiting`, so the FIFO fast paths (which
/// test `waiting > 0` anyway) leave for the fair code at no extra cost.
pub(crate) const FAIR_BIT: u32 = 1 << 31;

struct Queue<W> {
    entries: VecDeque<Arc<Entry<W>>>,
    /// Taken-by-cancel entries still in `entries`.
    dead: usize,
}

pub struct Slots<W: Waiter> {
    /// Changeable live ([`Slots::set_limit`]); read at every admission.
    pub(crate) limit: AtomicU32,
    pub(crate) active: AtomicU32,
    /// Live (not yet taken) entries in the queue.
    pub(crate) waiting: AtomicU32,
    queue: Mutex<Queue<W>>,
    /// Fair shares between flows ([`Slots::fair`]): per-flow queues served
    /// round-robin replace the FIFO, and `active`/`waiting` change only
    /// under this lock.
    pub(crate) fair: Option<Mutex<FairQueue<W>>>,
}

/// A held slot; dropping it frees the slot (and may admit the next waiter).
#[must_use = "dropping a permit releases the slot at once"]
pub struct Permit<W: Waiter> {
    slots: Arc<Slots<W>>,
    /// The flow holding it (fair slots; 0 otherwise).
    pub(crate) flow: u64,
}

/// Handle on a queued waiter, to take it out of the queue early.
pub struct Ticket<W: Waiter> {
    pub(crate) entry: Arc<Entry<W>>,
    pub(crate) slots: Arc<Slots<W>>,
    /// The flow it waits in (fair slots; 0 otherwise).
    pub(crate) flow: u64,
}

impl<W: Waiter> Slots<W> {
    /// `limit` simultaneous holders; `u32::MAX` means unlimited (still counted).
    pub fn new(limit: u32) -> Arc<Self> {
        Self::build(limit, None)
    }

    pub(crate) fn build(limit: u32, fair: Option<Mutex<FairQueue<W>>>) -> Arc<Self> {
        Arc::new(Slots {
            limit: AtomicU32::new(limit),
            active: AtomicU32::new(0),
            waiting: AtomicU32::new(if fair.is_some() { FAIR_BIT } else { 0 }),
            queue: Mutex::new(Queue {
                entries: VecDeque::new(),
                dead: 0,
            }),
            fair,
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::SeqCst)
    }

    /// Changes the limit of the live limiter. Raising it admits waiters at
    /// once (inside this call); lowering it preempts nobody: holders above
    /// the new limit keep their slots, and newcomers wait until enough leave.
    pub fn set_limit(self: &Arc<Self>, limit: u32) {
        self.limit.store(limit, Ordering::SeqCst);
        if let Some(fair) = &self.fair {
            // Orders the new limit before any enqueue that then reads it.
            drop(fair.lock());
        }
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.dispatch();
        }
    }

    /// Slots held right now.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }

    /// Live waiters in the queue right now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Acquire) & !FAIR_BIT
    }

    fn try_inc(&self) -> bool {
        // SeqCst throughout: this load pairs with the SeqCst `waiting` updates
        // of enqueue/release so neither side can miss the other's change.
        let mut cur = self.active.load(Ordering::SeqCst);
        loop {
            if cur >= self.limit.load(Ordering::SeqCst) {
                return false;
            }
            match self.active.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes a slot if one is free and nobody is waiting for one.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit<W>> {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            return self.try_acquire_busy();
        }
        if !self.try_inc() {
            return None;
        }
        Some(Permit {
            slots: self.clone(),
            flow: 0,
        })
    }

    /// [`Slots::try_acquire`] without the permit: as if it were
    /// [`detach`](Permit::detach)ed at once (the caller owes one
    /// [`Slots::release_detached`] if this returns true). Never on a fair
    /// limiter, and never while anyone waits (FIFO holds): then `false`,
    /// and the caller takes the path that can queue.
    pub fn try_acquire_detached(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) == 0 && self.try_inc()
    }

    /// [`Slots::try_acquire`] with waiters, or on a fair limiter (as flow
    /// 0; its `waiting` always has [`FAIR_BIT`]): out of the fast path.
    #[cold]
    #[inline(never)]
    fn try_acquire_busy(self: &Arc<Self>) -> Option<Permit<W>> {
        match self.fair {
            Some(_) => self.try_acquire_flow(0).permit(),
            None => None,
        }
    }

    /// [`Slots::enqueue`] on a fair limiter (as flow 0), out of the FIFO's path.
    #[cold]
    #[inline(never)]
    fn enqueue_fair(self: &Arc<Self>, waiter: W) -> Ticket<W> {
        self.enqueue_flow(0, waiter)
    }

    /// A permit of `flow` (fair slots): the caller has accounted for it.
    pub(crate) fn permit_of(self: &Arc<Self>, flow: u64) -> Permit<W> {
        Permit {
            slots: self.clone(),
            flow,
        }
    }

    /// Queues `waiter`. If a slot is free it is admitted before this returns
    /// (inside this call, on this thread).
    pub fn enqueue(self: &Arc<Self>, waiter: W) -> Ticket<W> {
        if self.fair.is_some() {
            return self.enqueue_fair(waiter);
        }
        let entry = Arc::new(Entry {
            state: AtomicU8::new(WAITING),
            payload: Mutex::new(Some(waiter)),
        });
        // Push and count under the queue lock: `waiting > 0` then always means
        // an entry is findable (no lost wake-ups), and a dispatcher popping
        // this entry never decrements before the increment (no wrap).
        {
            let mut q = self.queue.lock();
            q.entries.push_back(entry.clone());
            self.waiting.fetch_add(1, Ordering::SeqCst);
        }
        self.dispatch();
        Ticket {
            entry,
            slots: self.clone(),
            flow: 0,
        }
    }

    #[inline]
    fn release(self: &Arc<Self>, flow: u64) {
        let prev = self.active.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(prev > 0, "slot released twice");
        // Nobody waiting: nothing to hand on (a waiter counted after this load
        // dispatches for itself once pushed), so skip the dispatcher's bookkeeping.
        // A fair limiter always goes on (FAIR_BIT): its flow gives the slot back.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            if self.fair.is_some() {
                return self.fair_release_cold(flow);
            }
            self.dispatch();
        }
    }
}

/// A detached permit's `flow` (see [`Permit::detach`]): never a fair
/// limiter's, whose permits cannot be detached (its flows are hashes).
const DETACHED: u64 = u64::MAX;

impl<W: Waiter> Drop for Permit<W> {
    fn drop(&mut self) {
        if self.flow != DETACHED || self.slots.fair.is_some() {
            self.slots.release(self.flow);
        }
    }
}

impl<W: Waiter> Permit<W> {
    /// The limiter this permit belongs to.
    pub fn slots(&self) -> &Arc<Slots<W>> {
        &self.slots
    }

    /// Gives the permit up without freeing its slot: the caller now owes
    /// the limiter exactly one [`Slots::release_detached`]. For a holder
    /// whose end is an event that knows the limiter (ATS's TXN_CLOSE hook
    /// of one rule) rather than a value's drop. A fair limiter's permit
    /// (which gives its slot back to its flow) is handed back.
    pub fn detach(mut self) -> Result<(), Self> {
        if self.slots.fair.is_some() {
            return Err(self);
        }
        self.flow = DETACHED;
        Ok(())
    }
}

impl<W: Waiter> Slots<W> {
    /// Frees the slot of a permit [`detach`](Permit::detach)ed from this
    /// limiter, as dropping the permit would have (admitting the next
    /// waiter). Once per detached permit: more would free slots that others
    /// hold.
    pub fn release_detached(self: &Arc<Self>) {
        debug_assert!(self.fair.is_none(), "a fair permit is never detached");
        self.release(0);
    }
}

/// A [`Ticket`] that does not own its entry: the queue holds a waiting
/// entry, so while the waiter waits this reaches it; once it has left the
/// queue (admitted, cancelled, compacted away) it does nothing.
pub struct WeakTicket<W: Waiter> {
    entry: Weak<Entry<W>>,
    slots: Weak<Slots<W>>,
    flow: u64,
}

#[cfg(test)]
mod tests;
