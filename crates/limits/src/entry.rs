//! A waiter's place in a queue, shared by the FIFO ([`crate::slots`]) and
//! the per-flow queues ([`crate::fair`]): one CAS takes it out, and whoever
//! wins it (a grant or a cancel) owns the waiter.

use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

pub(crate) const WAITING: u8 = 0;
const TAKEN: u8 = 1;

pub(crate) struct Entry<W> {
    pub(crate) state: AtomicU8,
    pub(crate) payload: Mutex<Option<W>>,
}

impl<W> Entry<W> {
    /// The single transition out of the queue; the winner gets the payload.
    pub(crate) fn take(&self) -> Option<W> {
        self.state
            .compare_exchange(WAITING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .and_then(|_| self.payload.lock().take())
    }
}
