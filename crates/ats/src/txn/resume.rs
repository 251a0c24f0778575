//! Re-enabling a suspended transaction: the fail-safe answer for one left
//! unresolved, and a loop instead of recursion when one resume runs into
//! the next on the same thread.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ptr::NonNull;

use crate::sys;

/// Fails a suspended transaction safe. On its own thread only (it sets the status).
pub(super) fn fail_safe(txn: NonNull<sys::tsapi_httptxn>, can_answer: bool, why: &str) {
    if can_answer {
        crate::log::error(&format!("{why}: answering 500"));
        // SAFETY: the transaction is suspended at a hook, so it is alive; we
        // are on its thread.
        unsafe { sys::TSHttpTxnStatusSet(txn.as_ptr(), sys::TSHttpStatus(500)) };
        reenable_deferred(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_ERROR);
    } else {
        crate::log::error(&format!("{why}: continuing"));
        reenable_deferred(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
    }
}

pub(super) fn reenable_now(txn: sys::TSHttpTxn, ev: sys::TSEvent) {
    // SAFETY: callers pass a transaction suspended at a hook and resolve it once.
    unsafe { sys::TSHttpTxnReenable(txn, ev) }
}

thread_local! {
    static RESUMING: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<VecDeque<(usize, sys::TSEvent)>> = const { RefCell::new(VecDeque::new()) };
}

/// Re-enables a transaction that is *not* the one whose hook we are in.
///
/// On the transaction's own thread `TSHttpTxnReenable` runs the state machine
/// synchronously, which can close that transaction and, through a slot
/// release, resume the next one, and so on: recursion as deep as a queue.
/// Nested calls on one thread are turned into a loop instead.
pub(super) fn reenable_deferred(txn: sys::TSHttpTxn, ev: sys::TSEvent) {
    let queued = PENDING
        .try_with(|p| {
            p.try_borrow_mut()
                .map(|mut p| p.push_back((txn as usize, ev)))
                .is_ok()
        })
        .unwrap_or(false);
    if !queued {
        reenable_now(txn, ev);
        return;
    }
    if RESUMING.with(|r| r.replace(true)) {
        return; // an outer frame on this thread drains the list
    }
    // Cleared however this frame ends, so later resumes on this thread work.
    struct Draining;
    impl Drop for Draining {
        fn drop(&mut self) {
            let _ = RESUMING.try_with(|r| r.set(false));
        }
    }
    let _draining = Draining;
    loop {
        let next = PENDING.with(|p| p.borrow_mut().pop_front());
        match next {
            Some((t, e)) => reenable_now(t as sys::TSHttpTxn, e),
            None => break,
        }
    }
}
