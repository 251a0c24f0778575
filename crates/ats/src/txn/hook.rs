//! A transaction or session suspended at a hook, to be resolved exactly
//! once (into a [`Done`]).

use std::cell::Cell;
use std::ffi::c_void;

use super::park::Parked;
use super::resume::{fail_safe, reenable_now};
use super::{Done, HookId, Ssn, Txn};
use crate::event_thread::EventThread;
use crate::sys;

/// A transaction suspended at a hook, to be resolved exactly once.
///
/// An unresolved hook (the handler panicked) is failed safe by the
/// trampoline that created it, after the guard has stopped the unwind.
pub struct Hook<'a> {
    txn: Txn<'a>,
    id: HookId,
    resolved: &'a Cell<bool>,
}

impl<'a> Hook<'a> {
    pub(crate) fn new(txn: Txn<'a>, id: HookId, resolved: &'a Cell<bool>) -> Self {
        Hook { txn, id, resolved }
    }

    /// The transaction, borrowed from the hook: nothing obtained through it
    /// outlives `resume`, which may run the rest of the transaction (up to
    /// TXN_CLOSE and the release of its state) before returning.
    pub fn txn(&self) -> Txn<'_> {
        self.txn
    }

    pub fn id(&self) -> HookId {
        self.id
    }

    /// Lets the transaction go on.
    pub fn resume(self) -> Done {
        self.resolved.set(true);
        reenable_now(self.txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
        Done(())
    }

    /// Answers the client with ATS's error page for `status` (the body factory
    /// template) and skips the origin. Only meaningful before the response phase.
    pub fn error(self, status: u16) -> Done {
        self.resolved.set(true);
        self.txn.set_status(status);
        reenable_now(self.txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_ERROR);
        Done(())
    }

    /// Leaves the transaction suspended; `keep` receives the token that
    /// resolves it later (typically by storing it in a queue). The token
    /// remembers this thread, the transaction's own, as its home.
    pub fn park(self, keep: impl FnOnce(Parked)) -> Done {
        let Some(home) = EventThread::current() else {
            // Hooks run on event threads; without one there is no way back.
            crate::log::error("cannot park a transaction off an event thread: answering 500");
            return self.error(500);
        };
        // Whoever resolves it from another thread hands it back here.
        // Before `resolved`: if this panicked, the trampoline fails the
        // unresolved hook safe.
        crate::inbox::ensure_here();
        self.resolved.set(true);
        keep(Parked::new(self.txn, home, self.id.can_answer()));
        Done(())
    }
}

/// A session suspended at a session hook (e.g. SSN_CLOSE). Like [`Hook`],
/// an unresolved one is resumed by its trampoline after the guard.
pub struct SsnHook<'a> {
    ssn: Ssn<'a>,
    id: HookId,
    resolved: &'a Cell<bool>,
}

impl<'a> SsnHook<'a> {
    pub(crate) fn new(ssn: Ssn<'a>, id: HookId, resolved: &'a Cell<bool>) -> Self {
        SsnHook { ssn, id, resolved }
    }

    /// The session, borrowed from the hook: at SSN_CLOSE, `resume` frees the
    /// session and its state, so nothing read through it may outlive that.
    pub fn ssn(&self) -> Ssn<'_> {
        self.ssn
    }

    pub fn id(&self) -> HookId {
        self.id
    }

    pub fn resume(self) -> Done {
        self.resolved.set(true);
        // SAFETY: live session suspended at this hook, resolved once.
        unsafe { sys::TSHttpSsnReenable(self.ssn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE) };
        Done(())
    }
}

/// Fails a hook safe whose handler did not resolve it (it panicked, or
/// returned a `Done` it did not earn). Called by the trampoline after the guard.
pub(crate) fn hook_unresolved(txn: Txn<'_>, id: HookId) {
    fail_safe(txn.ptr, id.can_answer(), "hook handler did not complete");
}

/// Decodes the `edata` of a hook event.
pub(crate) enum HookTarget<'a> {
    Txn(Txn<'a>, HookId),
    Ssn(Ssn<'a>, HookId),
}

impl HookTarget<'_> {
    /// # Safety
    /// `edata` must be the event data ATS passed with `ev` to a hook continuation.
    pub(crate) unsafe fn from_event<'a>(
        ev: sys::TSEvent,
        edata: *mut c_void,
    ) -> Option<HookTarget<'a>> {
        let id = HookId::from_event(ev)?;
        if id == HookId::SsnClose {
            // SAFETY: session hook events carry the session.
            unsafe { Ssn::from_raw(edata.cast()) }.map(|s| HookTarget::Ssn(s, id))
        } else {
            // SAFETY: transaction hook events carry the transaction.
            unsafe { Txn::from_raw(edata.cast()) }.map(|t| HookTarget::Txn(t, id))
        }
    }
}
