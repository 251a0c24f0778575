//! A TXN_CLOSE hook whose handler is shared by the transactions it was
//! added to, in place of a per-transaction value: what a transaction must
//! give back at close is known from the hook itself (one slot of one
//! limiter), so nothing is stored on the transaction and nothing is looked
//! up there. That is the least a remap limiter can do (upstream's
//! rate_limit does the same), and ours costs two atomic additions more.
//!
//! Unlike [`crate::HookCont`], which lives as long as the .so, a
//! [`CloseHook`] belongs to something that comes and goes (a remap rule,
//! across reloads). Its continuation must outlive every transaction it was
//! added to, so it counts them: the one that makes the count zero after its
//! owner dropped it destroys the continuation, from its own TXN_CLOSE
//! callback (ATS frees it inside `TSContDestroy` there, which is safe
//! because neither ATS nor the callback touches it after) or from the
//! owner's `Drop` if no transaction is left. On 10.x the remap rule (the
//! usual owner) outlives its transactions (`~HttpSM` drops the remap
//! table after TXN_CLOSE), so the owner's `Drop` is the usual end.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::txn::Txn;
use crate::{guard, sys};

/// What a [`CloseHook`] does when a transaction it was added to closes.
pub trait CloseHandler: Send + Sync + 'static {
    /// The transaction is closing; it is re-enabled after this returns (or
    /// panics: then the guard logs the panic and the transaction goes on).
    fn closed(&self, txn: Txn<'_>);
}

/// The continuation's data.
struct Shared<H> {
    holders: Holders,
    handler: H,
}

/// Transactions holding the hook (times two), plus one once the owner has
/// let go: whoever brings it to zero frees the continuation, exactly once.
struct Holders(AtomicUsize);

const RETIRED: usize = 1;
const ONE: usize = 2;

impl Holders {
    fn new() -> Self {
        Holders(AtomicUsize::new(0))
    }

    /// One more transaction holds the hook. Relaxed: every add happens
    /// through a `&CloseHook`, so before the owner's `Drop` (whose `&mut`
    /// comes after them), and the retiring read-modify-write reads them.
    fn add(&self) {
        self.0.fetch_add(ONE, Ordering::Relaxed);
    }

    /// A holder closed: true if it was the last one after the owner let go.
    fn close(&self) -> bool {
        self.0.fetch_sub(ONE, Ordering::AcqRel) == ONE | RETIRED
    }

    /// The owner let go: true if no transaction holds the hook.
    fn retire(&self) -> bool {
        self.0.fetch_or(RETIRED, Ordering::AcqRel) == 0
    }
}

/// A TXN_CLOSE continuation bound to a [`CloseHandler`] (see the module).
pub struct CloseHook<H: CloseHandler> {
    cont: NonNull<sys::tsapi_cont>,
    shared: NonNull<Shared<H>>,
}

// SAFETY: the continuation has no mutex and its handler is Send + Sync;
// adding it to transactions from any thread is allowed, and the shared
// state is atomic.
unsafe impl<H: CloseHandler> Send for CloseHook<H> {}
// SAFETY: as for Send; `&CloseHook` only adds the hook and reads the handler.
unsafe impl<H: CloseHandler> Sync for CloseHook<H> {}

impl<H: CloseHandler> CloseHook<H> {
    pub fn new(handler: H) -> Result<Self, String> {
        // SAFETY: a valid handler function; a null mutex is allowed for hook
        // continuations (the transaction's lock serialises its events).
        let raw = unsafe { sys::TSContCreate(Some(closed::<H>), std::ptr::null_mut()) };
        let cont = NonNull::new(raw).ok_or("TSContCreate failed")?;
        let shared = NonNull::from(Box::leak(Box::new(Shared {
            holders: Holders::new(),
            handler,
        })));
        // SAFETY: live continuation; the box is freed by `destroy`, after
        // the continuation's last callback.
        unsafe { sys::TSContDataSet(cont.as_ptr(), shared.as_ptr().cast()) };
        Ok(CloseHook { cont, shared })
    }

    /// The handler, as the transactions' close will see it.
    pub fn handler(&self) -> &H {
        // SAFETY: freed only once retired (our Drop) and drained.
        &unsafe { self.shared.as_ref() }.handler
    }

    /// Runs the handler when `txn` closes. Add it at most once per
    /// transaction: Traffic Server ignores a continuation already on the
    /// hook (`TSHttpTxnHookAdd`, 9.2 and 10.1.4), so a second add would
    /// count a run that never comes and leave the continuation allocated
    /// once its owner is gone.
    pub fn add(&self, txn: Txn<'_>) {
        // Counted before the hook exists, so the count never reads zero
        // while a callback can still come.
        // SAFETY: alive while `self` is (not retired).
        unsafe { self.shared.as_ref() }.holders.add();
        // SAFETY: live transaction; the continuation lives until the count
        // says no transaction holds it.
        unsafe {
            sys::TSHttpTxnHookAdd(
                txn.as_ptr(),
                sys::TSHttpHookID::TS_HTTP_TXN_CLOSE_HOOK,
                self.cont.as_ptr(),
            )
        }
    }
}

impl<H: CloseHandler> Drop for CloseHook<H> {
    fn drop(&mut self) {
        // SAFETY: not yet retired, so alive.
        if unsafe { self.shared.as_ref() }.holders.retire() {
            if crate::EventThread::current().is_none() {
                // Off ATS's threads (a plugin thread dropped the owner),
                // 9.x's continuation allocator would dereference a null
                // thread: the continuation is left (no callback can come)
                // and only its data is freed.
                crate::log::debug(
                    "a TXN_CLOSE hook dropped off ATS's threads: its continuation is left",
                );
                guard::catch(
                    "TXN_CLOSE hook (freeing)",
                    || (),
                    || {
                        // SAFETY: leaked in `new`; no callback can come (count zero, retired).
                        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
                    },
                );
                return;
            }
            // SAFETY: retired with no transaction holding the hook: no
            // callback can come any more.
            unsafe {
                destroy(
                    self.cont.as_ptr(),
                    self.shared,
                    "the TXN_CLOSE hook of a rule now gone is freed (no transaction held it)",
                )
            };
        }
    }
}

/// Frees the continuation and its data.
///
/// # Safety
/// No callback of `cont` can run any more (retired, count zero), or this
/// is its last callback and nothing touches `shared` after this call.
unsafe fn destroy<H: CloseHandler>(cont: sys::TSCont, shared: NonNull<Shared<H>>, why: &str) {
    // SAFETY: per the contract. ATS frees it here, at once, unless another
    // call of it is in flight (none is: the count is zero) or it was never
    // called (then through an immediate event on this thread, which no
    // longer calls the handler). On an event thread (the owner's `Drop`
    // checks).
    unsafe { sys::TSContDestroy(cont) };
    crate::log::debug(why);
    // The handler's drop is plugin code: guarded like any.
    guard::catch(
        "TXN_CLOSE hook (freeing)",
        || (),
        || {
            // SAFETY: leaked in `new`, freed once, here.
            drop(unsafe { Box::from_raw(shared.as_ptr()) });
        },
    );
}

unsafe extern "C" fn closed<H: CloseHandler>(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    let txn = match ev {
        // SAFETY: TXN_CLOSE's event data is the transaction.
        sys::TSEvent::TS_EVENT_HTTP_TXN_CLOSE => unsafe { Txn::from_raw(edata.cast()) },
        _ => None,
    };
    let Some(txn) = txn else {
        // Only ever added as a TXN_CLOSE hook.
        crate::log::error(&format!("TXN_CLOSE hook got unexpected event {}", ev.0));
        return 0;
    };
    // SAFETY: the data was set in `new` to a live Shared<H>, freed only
    // after the last transaction holding the hook (this one) closed.
    let Some(shared) = NonNull::new(unsafe { sys::TSContDataGet(cont) }.cast::<Shared<H>>()) else {
        // SAFETY: suspended at this hook: never left hanging.
        unsafe { sys::TSHttpTxnReenable(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE) };
        return 0;
    };
    // SAFETY: as above.
    let s = unsafe { shared.as_ref() };
    guard::catch("TXN_CLOSE hook", || (), || s.handler.closed(txn));
    // Always continue at close, panic or not.
    // SAFETY: the transaction is suspended at this hook, re-enabled once.
    unsafe { sys::TSHttpTxnReenable(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE) };
    if s.holders.close() {
        // SAFETY: the owner is gone and this was the last transaction:
        // nothing else reaches `shared`, and this callback touches nothing
        // after.
        unsafe {
            destroy(
                cont,
                shared,
                "the TXN_CLOSE hook of a rule now gone is freed (its last transaction closed)",
            )
        };
    }
    0
}

#[cfg(test)]
mod tests;
