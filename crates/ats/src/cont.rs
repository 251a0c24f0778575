//! Continuations that handle transaction and session hooks.
//!
//! One [`HookCont`] per handler type is created at plugin init and hooked onto
//! any number of transactions; it has no mutex (the transaction's own lock
//! serialises its events) and is never destroyed, because a transaction may
//! still hold a hook to it until the plugin's .so is unloaded. Hooking it
//! onto a transaction or session ([`Txn::hook`], [`Ssn::hook`]) is here too.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::txn::{hook_unresolved, Done, Hook, HookId, HookTarget, Ssn, SsnHook, Txn};
use crate::{guard, sys};

/// Handles the hooks a plugin adds with [`crate::Txn::hook`] / [`crate::Ssn::hook`].
pub trait HookHandler: Send + Sync + 'static {
    /// A transaction hook fired. Resolve `hook` (resume, error or park).
    fn on_txn(&self, hook: Hook<'_>) -> Done;

    /// A session hook fired (e.g. SSN_CLOSE). Defaults to resuming.
    fn on_ssn(&self, hook: SsnHook<'_>) -> Done {
        hook.resume()
    }
}

/// A hook continuation bound to a [`HookHandler`]; lives as long as the .so.
pub struct HookCont {
    cont: NonNull<sys::tsapi_cont>,
}

// SAFETY: the continuation has no mutex and its handler is Send + Sync; ATS
// allows adding one continuation as a hook to many transactions from any thread.
unsafe impl Send for HookCont {}
// SAFETY: see Send; &HookCont only exposes the pointer for TS*HookAdd.
unsafe impl Sync for HookCont {}

impl HookCont {
    /// Creates the continuation. Call once, at plugin init, and keep it in a
    /// `static` (it is intentionally never destroyed).
    pub fn new<H: HookHandler>(handler: H) -> Result<HookCont, String> {
        // SAFETY: a valid handler function; null mutex is allowed for hook conts.
        let raw = unsafe { sys::TSContCreate(Some(trampoline::<H>), std::ptr::null_mut()) };
        let cont = NonNull::new(raw).ok_or("TSContCreate failed")?;
        let data = Box::into_raw(Box::new(handler));
        // SAFETY: live continuation; the box is leaked on purpose (see type docs).
        unsafe { sys::TSContDataSet(cont.as_ptr(), data.cast()) };
        Ok(HookCont { cont })
    }

    pub(crate) fn as_ptr(&self) -> sys::TSCont {
        self.cont.as_ptr()
    }
}

// Hooking a continuation onto a transaction or session is here, beside the
// continuation: cont.rs uses txn.rs, and txn.rs never names a continuation.
impl Txn<'_> {
    /// Adds a transaction-local hook handled by `cont`.
    pub fn hook(self, id: HookId, cont: &HookCont) {
        // SAFETY: live txn; the continuation lives for the whole .so lifetime.
        unsafe { sys::TSHttpTxnHookAdd(self.as_ptr(), id.to_sys(), cont.as_ptr()) }
    }
}

impl Ssn<'_> {
    /// Adds a session hook (e.g. [`HookId::SsnClose`]) handled by `cont`.
    pub fn hook(self, id: HookId, cont: &HookCont) {
        // SAFETY: live session; continuation lives for the .so lifetime.
        unsafe { sys::TSHttpSsnHookAdd(self.as_ptr(), id.to_sys(), cont.as_ptr()) }
    }
}

unsafe extern "C" fn trampoline<H: HookHandler>(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    // SAFETY: ATS passes the event data that belongs to `ev`.
    let Some(target) = (unsafe { HookTarget::from_event(ev, edata) }) else {
        crate::log::error(&format!("hook continuation got unexpected event {}", ev.0));
        return 0;
    };
    // SAFETY: the data was set to a leaked Box<H> in HookCont::new and is never freed.
    let handler = unsafe { &*sys::TSContDataGet(cont).cast::<H>() };
    // The hook records its resolution here; what an unresolved one needs is
    // decided after the guard, never while a panic unwinds.
    let resolved = Cell::new(false);
    match target {
        HookTarget::Txn(txn, id) => {
            guard::catch(
                "hook handler",
                || (),
                || {
                    let _done = handler.on_txn(Hook::new(txn, id, &resolved));
                },
            );
            if !resolved.get() {
                hook_unresolved(txn, id);
            }
        }
        HookTarget::Ssn(ssn, id) => {
            guard::catch(
                "session hook handler",
                || (),
                || {
                    let _done = handler.on_ssn(SsnHook::new(ssn, id, &resolved));
                },
            );
            if !resolved.get() {
                // Continuing is always safe for a session.
                // SAFETY: live session suspended at this hook, not yet re-enabled.
                unsafe {
                    sys::TSHttpSsnReenable(ssn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE)
                };
            }
        }
    }
    0
}
