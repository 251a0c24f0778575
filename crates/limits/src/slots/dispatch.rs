//! The hand-off of [`Slots`]: a freed slot goes to the oldest live waiter,
//! with no lock held while its `admit` runs, and a nested release (an
//! `admit` that gives its slot back at once) leaves the slot to the loop
//! already running below it.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Permit, Slots, Waiter};

thread_local! {
    /// Limiters this thread is dispatching for (a short list: usually 0 or 1).
    static DISPATCHING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl<W: Waiter> Slots<W> {
    /// Pops the oldest live waiter.
    fn pop_live(&self) -> Option<W> {
        let mut q = self.queue.lock();
        while let Some(e) = q.entries.pop_front() {
            if let Some(w) = e.take() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return Some(w);
            }
            q.dead = q.dead.saturating_sub(1);
        }
        None
    }

    /// Gives free slots to waiters, oldest first, until either runs out.
    ///
    /// An `admit` that releases a permit of this limiter on the spot would
    /// re-enter here once per waiter; instead the nested release only frees
    /// the slot and this loop, still running below it, hands it on.
    #[inline(never)]
    pub(crate) fn dispatch(self: &Arc<Self>) {
        self.registered(|| match &self.fair {
            Some(_) => self.fair_dispatch_loop(None),
            None => self.dispatch_loop(),
        });
    }

    /// True while this thread runs [`Slots::dispatch`] for this limiter.
    pub(crate) fn dispatching_here(&self) -> bool {
        let me = self as *const Self as *const () as usize;
        DISPATCHING
            .try_with(|d| d.borrow().contains(&me))
            .unwrap_or(false)
    }

    /// Dispatch of a fair limiter whose `first` waiter was already granted a
    /// slot (the caller checked that this thread is not dispatching here).
    #[inline(never)]
    pub(crate) fn dispatch_with(self: &Arc<Self>, first: Option<(u64, W)>) {
        self.registered(|| self.fair_dispatch_loop(first));
    }

    /// Runs `hand_out` unless this thread is already dispatching for this
    /// limiter, then re-raises the first panic of an `admit`.
    #[inline(always)]
    fn registered(&self, hand_out: impl FnOnce() -> Option<Box<dyn std::any::Any + Send>>) {
        let me = self as *const Self as *const () as usize;
        let nested = DISPATCHING
            .try_with(|d| {
                let mut d = d.borrow_mut();
                let nested = d.contains(&me);
                if !nested {
                    d.push(me);
                }
                nested
            })
            .unwrap_or(false);
        if nested {
            return;
        }
        // Unregisters even when an `admit` panics, or this limiter would look
        // "nested" on this thread forever and never hand a slot on again.
        struct Unregister(usize);
        impl Drop for Unregister {
            fn drop(&mut self) {
                let _ = DISPATCHING.try_with(|d| d.borrow_mut().retain(|&x| x != self.0));
            }
        }
        let unregister = Unregister(me);
        let panicked = hand_out();
        drop(unregister);
        if let Some(payload) = panicked {
            // Every free slot has been handed on; now let the caller's guard see it.
            std::panic::resume_unwind(payload);
        }
    }

    /// Returns the payload of the first `admit` that panicked (its permit was
    /// dropped while unwinding; the loop carried on handing slots out).
    fn dispatch_loop(self: &Arc<Self>) -> Option<Box<dyn std::any::Any + Send>> {
        let mut panicked = None;
        while self.waiting.load(Ordering::SeqCst) > 0 && self.try_inc() {
            // We hold a slot: offer it down the queue until someone keeps it.
            loop {
                match self.pop_live() {
                    Some(w) => {
                        let permit = Permit {
                            slots: self.clone(),
                            flow: 0,
                        };
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            w.admit(permit)
                        })) {
                            Ok(Ok(())) => break,
                            Ok(Err(permit)) => std::mem::forget(permit), // declined: reuse the slot
                            Err(payload) => {
                                panicked.get_or_insert(payload);
                                break;
                            }
                        }
                    }
                    None => {
                        // Nobody findable (the waiter we counted left): undo and
                        // re-check, in case an enqueue raced with us.
                        self.active.fetch_sub(1, Ordering::SeqCst);
                        break;
                    }
                }
            }
        }
        panicked
    }
}
