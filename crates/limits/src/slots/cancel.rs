//! Waiters leaving a [`Slots`] queue before a slot reaches them: a
//! [`Ticket`] (or [`WeakTicket`]) cancels one, [`Slots::remove_waiting`]
//! takes out all that match. Whoever wins the entry's CAS (this or a grant)
//! owns the waiter.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Slots, Ticket, Waiter, WeakTicket};
use crate::entry::{Entry, WAITING};

impl<W: Waiter> Slots<W> {
    /// Takes out of the queue every waiter for which `gone` is true and
    /// returns them, oldest first. `gone` runs without the queue lock (on a
    /// snapshot), so it may be slow (a syscall); a waiter admitted meanwhile
    /// is simply not returned.
    pub fn remove_waiting(&self, mut gone: impl FnMut(&W) -> bool) -> Vec<W> {
        if self.fair.is_some() {
            return self.fair_remove_waiting(gone);
        }
        let snapshot: Vec<Arc<Entry<W>>> = self.queue.lock().entries.iter().cloned().collect();
        let mut removed = Vec::new();
        for e in snapshot {
            let is_gone = e.payload.lock().as_ref().is_some_and(&mut gone);
            if !is_gone {
                continue;
            }
            if let Some(w) = e.take() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                self.queue.lock().dead += 1;
                removed.push(w);
            }
        }
        if !removed.is_empty() {
            let mut q = self.queue.lock();
            q.entries
                .retain(|e| e.state.load(Ordering::Acquire) == WAITING);
            q.dead = 0;
        }
        removed
    }
}

impl<W: Waiter> Ticket<W> {
    /// Takes the waiter out of the queue if it is still waiting, returning
    /// it; `None` if it was already admitted (or cancelled).
    pub fn cancel(&self) -> Option<W> {
        let w = self.entry.take()?;
        if self.slots.fair.is_some() {
            self.slots.fair_cancelled(self.flow);
            return Some(w);
        }
        self.slots.waiting.fetch_sub(1, Ordering::SeqCst);
        let mut q = self.slots.queue.lock();
        q.dead += 1;
        if q.dead > 32 && q.dead * 2 > q.entries.len() {
            q.entries
                .retain(|e| e.state.load(Ordering::Acquire) == WAITING);
            q.dead = 0;
        }
        drop(q);
        Some(w)
    }

    /// True while the waiter is still queued.
    pub fn is_waiting(&self) -> bool {
        self.entry.state.load(Ordering::Acquire) == WAITING
    }

    /// A handle that does not keep the entry (nor the limiter) alive: for
    /// lists kept outside the queue, which must not form a cycle with a
    /// waiter that refers back to them.
    pub fn downgrade(&self) -> WeakTicket<W> {
        WeakTicket {
            entry: Arc::downgrade(&self.entry),
            slots: Arc::downgrade(&self.slots),
            flow: self.flow,
        }
    }
}

impl<W: Waiter> WeakTicket<W> {
    /// [`Ticket::cancel`], if the entry is still there.
    pub fn cancel(&self) -> Option<W> {
        let entry = self.entry.upgrade()?;
        if entry.state.load(Ordering::Acquire) != WAITING {
            return None;
        }
        let slots = self.slots.upgrade()?;
        Ticket {
            entry,
            slots,
            flow: self.flow,
        }
        .cancel()
    }

    /// True while the waiter is still queued.
    pub fn is_waiting(&self) -> bool {
        self.entry
            .upgrade()
            .is_some_and(|e| e.state.load(Ordering::Acquire) == WAITING)
    }
}
