//! A transaction left suspended at a hook ([`Parked`]), resolved later from
//! any thread, but read and changed only on its home thread ([`HomeTxn`]).

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::resume::{fail_safe, reenable_deferred};
use super::{Done, Txn};
use crate::event_thread::{thread_bound, EventThread, ThreadBound};
use crate::sys;

/// A transaction left suspended at a hook. `Send`: it may travel to any
/// thread (a queue, a timer), but the transaction itself is read and changed
/// only on its home thread, through [`Parked::on_home`]. Dropping it
/// unresolved fails the transaction safe (on its home thread, and never
/// while a panic unwinds).
pub struct Parked {
    txn: NonNull<sys::tsapi_httptxn>,
    home: EventThread,
    client_fd: Option<std::ffi::c_int>,
    can_answer: bool,
    resolved: bool,
}

// SAFETY: a parked transaction cannot close (ATS waits for our re-enable), so
// the pointer stays valid wherever the token goes; off its home thread the
// token only re-enables (documented and implemented in 9.2 InkAPI.cc to work
// from any thread) or schedules work onto the home thread.
unsafe impl Send for Parked {}

impl Parked {
    /// The token of `txn`, suspended at a hook on `home`, its own thread
    /// (where this runs: the client socket is read here, see `client_fd`).
    pub(super) fn new(txn: Txn<'_>, home: EventThread, can_answer: bool) -> Parked {
        Parked {
            txn: txn.ptr,
            home,
            client_fd: txn.client_fd(),
            can_answer,
            resolved: false,
        }
    }

    /// True if the client socket reached end-of-file or failed. While a
    /// transaction waits in a hook ATS does not watch plain HTTP/1.1 clients
    /// (it only half-closes on a FIN), so a queueing plugin asks this before
    /// giving it a slot. Callable from any thread: it reads the socket, not
    /// the transaction ([`HomeTxn::client_gone`] also asks ATS). A client
    /// that half-closes on purpose after sending its request is
    /// indistinguishable from one that left, and counts as gone.
    pub fn client_gone(&self) -> bool {
        self.client_fd.is_some_and(crate::net::peer_gone)
    }

    /// The transaction's own thread.
    pub fn home(&self) -> EventThread {
        self.home
    }

    /// Runs `f` on the transaction's home thread: at once if this is it,
    /// else as an event scheduled there. `f` receives the only handle
    /// through which a parked transaction can be read or changed, and must
    /// resolve it.
    ///
    /// Scheduling needs an ATS thread: called from a thread the plugin
    /// started itself, `f` is dropped unrun and the transaction fails safe
    /// (an error answer without the rule's status). Such threads hand work
    /// to ATS threads through a queue instead.
    pub fn on_home(self, f: impl FnOnce(HomeTxn<'_>) -> Done + Send + 'static) {
        // Never inline while a panic unwinds (a slot released by a dropped
        // permit hands over here): the resume would run ATS's state machine
        // inside the unwind.
        if EventThread::current() == Some(self.home) && !std::thread::panicking() {
            let _done = f(HomeTxn {
                parked: self,
                _here: thread_bound(),
            });
            return;
        }
        let home = self.home;
        let mut slot = Some((self, f));
        let sent = crate::sched::run_on(home, move || {
            if let Some((parked, f)) = slot.take() {
                let _done = f(HomeTxn {
                    parked,
                    _here: thread_bound(),
                });
            }
        });
        if let Err(e) = sent {
            // The closure (and the token in it) came back dropped: the
            // token's Drop has failed the transaction safe.
            crate::log::error(&format!("cannot schedule onto a transaction's thread: {e}"));
        }
    }

    fn resolve(&mut self, ev: sys::TSEvent) {
        self.resolved = true;
        reenable_deferred(self.txn.as_ptr(), ev);
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if self.resolved {
            return;
        }
        self.resolved = true;
        let (txn, home, can_answer) = (SendTxn(self.txn), self.home, self.can_answer);
        crate::guard::defer(move || {
            let act = move || {
                fail_safe(
                    txn.ptr(),
                    can_answer,
                    "parked transaction dropped unresolved",
                )
            };
            if EventThread::current() == Some(home) {
                act();
            } else if let Err(e) = crate::sched::run_on(home, act) {
                // Not even a hop home: re-enabling (any thread) at least
                // lets the transaction end; its status cannot be set here.
                crate::log::error(&format!(
                    "parked transaction dropped unresolved off its thread ({e}): re-enabling"
                ));
                let ev = match can_answer {
                    true => sys::TSEvent::TS_EVENT_HTTP_ERROR,
                    false => sys::TSEvent::TS_EVENT_HTTP_CONTINUE,
                };
                reenable_deferred(txn.ptr().as_ptr(), ev);
            }
        });
    }
}

/// A transaction pointer moved into a fail-safe action; see `Parked`'s `Send`.
#[derive(Clone, Copy)]
struct SendTxn(NonNull<sys::tsapi_httptxn>);
// SAFETY: as for Parked: the transaction waits for this re-enable.
unsafe impl Send for SendTxn {}

impl SendTxn {
    // A method, so closures capture the whole (Send) wrapper, not its field.
    fn ptr(&self) -> NonNull<sys::tsapi_httptxn> {
        self.0
    }
}

/// A parked transaction on its home thread: the only way to read or change
/// it while it is parked. Not `Send`, and borrowed for the duration of the
/// [`Parked::on_home`] call, so it cannot leave that thread or call.
pub struct HomeTxn<'a> {
    parked: Parked,
    _here: ThreadBound<'a>,
}

impl HomeTxn<'_> {
    /// The transaction, until it is resolved.
    pub fn txn(&self) -> Txn<'_> {
        Txn {
            ptr: self.parked.txn,
            _life: PhantomData,
        }
    }

    /// True if the client is gone: ATS flagged an abort, or its socket
    /// reached end-of-file or failed (see [`Parked::client_gone`]).
    pub fn client_gone(&self) -> bool {
        self.txn().client_aborted() || self.parked.client_gone()
    }

    /// Resumes the transaction.
    pub fn resume(mut self) -> Done {
        self.parked.resolve(sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
        Done(())
    }

    /// Answers with `status` (set a body with [`Txn::set_error_body`] first:
    /// from a hook ATS sends no body-factory page).
    pub fn fail(mut self, status: u16) -> Done {
        self.txn().set_status(status);
        self.parked.resolve(sys::TSEvent::TS_EVENT_HTTP_ERROR);
        Done(())
    }
}

/// A minimal HTML page for `status`, like ATS's body-factory pages: from a
/// hook ATS sends a bare status, so plugins that refuse a parked
/// transaction give it this body ([`Txn::set_error_body`]).
pub fn error_page(status: u16) -> String {
    let reason = match status {
        403 => "Forbidden",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Request Refused",
    };
    format!("<HTML>\n<HEAD>\n<TITLE>{reason}</TITLE>\n</HEAD>\n<BODY>\n<H1>{reason}</H1>\n<HR>\n</BODY>\n</HTML>\n")
}
