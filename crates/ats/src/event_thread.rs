//! ATS event threads: the one a transaction runs on, remembered to come
//! back to it (`sched::run_on`, [`crate::Parked::home`]). A leaf of
//! the crate: both `sched` and `txn` use it, and it uses neither.

use std::ptr::NonNull;

use crate::sys;

/// What a handle that must stay on its thread and within a call carries:
/// borrowed for `'a`, and neither `Send` nor `Sync`. Zero-sized. Builtin
/// types only (not `PhantomData<*const ()>`), so that compiler errors about
/// it name no file of std's, whose paths move between toolchains (the
/// compile-fail tests compare those errors).
pub(crate) type ThreadBound<'a> = (std::marker::PhantomData<&'a ()>, [*const (); 0]);

/// The [`ThreadBound`] value.
pub(crate) const fn thread_bound<'a>() -> ThreadBound<'a> {
    (std::marker::PhantomData, [])
}

/// An ATS event thread, remembered to come back to it later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventThread(NonNull<sys::tsapi_event_thread>);

// SAFETY: an opaque handle to an EThread, which lives as long as the process;
// it is only compared and passed to TSContScheduleOnThread.
unsafe impl Send for EventThread {}
// SAFETY: see Send.
unsafe impl Sync for EventThread {}

impl EventThread {
    /// The event thread this code runs on; `None` off ATS's event threads.
    pub fn current() -> Option<EventThread> {
        // SAFETY: no preconditions; null off event threads.
        NonNull::new(unsafe { sys::TSEventThreadSelf() }).map(EventThread)
    }

    pub(crate) fn as_ptr(self) -> sys::TSEventThread {
        self.0.as_ptr()
    }
}
