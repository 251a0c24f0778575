//! A handshake parked at the client hello: [`ParkedHello`], the token
//! that may travel between threads, and [`HomeHello`], what resolves it on
//! its own thread; the deadline every park has (see the parent module).

use std::ffi::c_int;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{reenable, ClientHello, VConn, MARKS};
use crate::event_thread::{thread_bound, EventThread, ThreadBound};
use crate::sched::Timer;
use crate::txn::Done;
use crate::{guard, sys};

/// How much later than a parked handshake's deadline ATS may time it out:
/// the deadline timer and ATS's inactivity check run on the same thread,
/// so only a stall of the thread longer than this could reorder them.
const ATS_MARGIN: Duration = Duration::from_secs(10);

impl ClientHello<'_> {
    /// Leaves the handshake suspended; `keep` receives the token that
    /// resolves it later. If it is still parked after `deadline` (or,
    /// sooner, a second before Traffic Server's own handshake timeout),
    /// `on_deadline` resolves it on its thread instead, and a later
    /// [`ParkedHello::on_home`] does nothing.
    ///
    /// While parked, the connection's inactivity timeout is pushed to the
    /// deadline plus [`ATS_MARGIN`], so that ATS cannot time it out first
    /// (the timeout it set at the handshake's start, or one it would apply
    /// later from a changed record, could otherwise fall before the
    /// deadline); resolving it gives the handshake back what it had left.
    pub fn park(
        self,
        deadline: Option<Duration>,
        on_deadline: impl FnOnce(HomeHello<'_>) -> Done + Send + 'static,
        keep: impl FnOnce(ParkedHello),
    ) -> Done {
        let Some(home) = EventThread::current() else {
            crate::log::error("cannot park a handshake off an event thread: it goes on");
            return self.resume();
        };
        let left = ats_timeout_left(self.vc);
        let limit = match (deadline, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(after) = limit {
            // SAFETY: suspended at the hook running now, on its thread.
            unsafe { set_inactivity_timeout(self.vc.ptr, after + ATS_MARGIN) };
        }
        let shared = Arc::new(Shared {
            vc: self.vc.ptr,
            home,
            fd: self.vc.fd(),
            claimed: AtomicBool::new(false),
            timer: OnceLock::new(),
        });
        if let Some(after) = limit {
            let s = shared.clone();
            let armed = Timer::after(after, home, move || {
                if s.claim() {
                    let _done = on_deadline(HomeHello::new(s));
                }
            });
            match armed {
                Ok(t) => {
                    let _ = shared.timer.set(t);
                }
                Err(e) => {
                    // No way to bound the park: better refused than a
                    // re-enable of a connection ATS may have freed.
                    crate::log::error(&format!("cannot arm a parked handshake's deadline: {e}"));
                    return self.refuse();
                }
            }
        }
        // Whoever resolves it from another thread hands it back here.
        // Before `resolved`: if this panicked, the hook is failed safe.
        crate::inbox::ensure_here();
        self.resolved.set(true);
        keep(ParkedHello {
            shared: Some(shared),
        });
        Done::new()
    }
}

/// A handshake's time budget in Traffic Server: its handshake timeout,
/// else the default inactivity timeout (read once, when the hooks are
/// added: the handshake timeout applies from a restart only, and the park
/// sets each parked connection's timeout itself); `None` if neither is set.
static HANDSHAKE_BUDGET: OnceLock<Option<Duration>> = OnceLock::new();

pub(super) fn read_handshake_budget() {
    let secs = [
        "proxy.config.ssl.handshake_timeout_in",
        "proxy.config.net.default_inactivity_timeout",
    ]
    .into_iter()
    .filter_map(crate::mgmt::record_int)
    .find(|&s| s > 0)
    .and_then(|s| u64::try_from(s).ok());
    let _ = HANDSHAKE_BUDGET.set(secs.map(Duration::from_secs));
}

/// How long the handshake has been going on (from VCONN_START).
fn age(vc: VConn<'_>) -> Duration {
    MARKS
        .get()
        .and_then(|m| m.age(vc))
        .unwrap_or(Duration::ZERO)
}

/// What a handshake may still spend of its budget, less a second: `None`
/// if it has none.
fn ats_timeout_left(vc: VConn<'_>) -> Option<Duration> {
    let total = (*HANDSHAKE_BUDGET.get()?)?;
    Some(
        total
            .saturating_sub(Duration::from_secs(1))
            .saturating_sub(age(vc)),
    )
}

/// `TSVConnInactivityTimeoutSet`.
///
/// # Safety
/// `vc` is a live connection and this is its own thread.
unsafe fn set_inactivity_timeout(vc: NonNull<sys::tsapi_cont>, after: Duration) {
    let ns = sys::TSHRTime::try_from(after.as_nanos()).unwrap_or(sys::TSHRTime::MAX);
    // SAFETY: per the contract.
    unsafe { sys::TSVConnInactivityTimeoutSet(vc.as_ptr(), ns) }
}

/// Gives a resolved handshake back what it has left of its budget (at
/// least a second), as ATS would have counted it without the park.
///
/// # Safety
/// As for [`set_inactivity_timeout`].
unsafe fn restore_inactivity_timeout(vc: NonNull<sys::tsapi_cont>) {
    let Some(Some(total)) = HANDSHAKE_BUDGET.get() else {
        return;
    };
    let conn = VConn {
        ptr: vc,
        _life: PhantomData,
    };
    let left = total.saturating_sub(age(conn)).max(Duration::from_secs(1));
    // SAFETY: per the contract.
    unsafe { set_inactivity_timeout(vc, left) };
}

/// A parked handshake, shared by its token and its deadline timer: the
/// first to claim it resolves it.
struct Shared {
    vc: NonNull<sys::tsapi_cont>,
    home: EventThread,
    fd: Option<c_int>,
    claimed: AtomicBool,
    timer: OnceLock<Timer>,
}

// SAFETY: the connection pointer is only used on its home thread (by the
// claimer), while the connection waits for that re-enable: the deadline
// guarantees ATS has not closed it (see the module's docs).
unsafe impl Send for Shared {}
// SAFETY: as above; the other fields are Sync.
unsafe impl Sync for Shared {}

impl Shared {
    /// True for the one caller that resolves the handshake.
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    fn cancel_timer(&self) {
        if let Some(t) = self.timer.get() {
            t.cancel();
        }
    }
}

/// A handshake left suspended at the client hello. `Send`: it may travel
/// to any thread (a queue, a timer); the connection is touched only on its
/// home thread, through [`ParkedHello::on_home`]. Dropped unresolved, the
/// handshake goes on (on its thread).
pub struct ParkedHello {
    shared: Option<Arc<Shared>>,
}

impl ParkedHello {
    /// True if the client's socket reached end-of-file or failed: a client
    /// that gave up while parked (ATS does not read a parked handshake).
    /// Callable from any thread: it peeks at the socket.
    pub fn client_gone(&self) -> bool {
        match self.shared.as_ref().and_then(|s| s.fd) {
            Some(fd) => crate::net::peer_gone(fd),
            None => false,
        }
    }

    /// True once the handshake was resolved (by its deadline): nothing
    /// more can be done with it.
    pub fn resolved(&self) -> bool {
        self.shared
            .as_ref()
            .is_none_or(|s| s.claimed.load(Ordering::Acquire))
    }

    /// The connection's own thread.
    pub fn home(&self) -> Option<EventThread> {
        self.shared.as_ref().map(|s| s.home)
    }

    /// Runs `f` on the connection's thread, as an event of its own (never
    /// inline: a slot freed inside another connection's hook must not run
    /// this handshake from there), unless the deadline resolved it first:
    /// then `f` is dropped unrun.
    pub fn on_home(mut self, f: impl FnOnce(HomeHello<'_>) -> Done + Send + 'static) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let home = shared.home;
        let sent = crate::sched::run_on(home, move || {
            if shared.claim() {
                shared.cancel_timer();
                let _done = f(HomeHello::new(shared));
            }
        });
        if let Err(e) = sent {
            // Off ATS threads: the deadline (if any) resolves it.
            crate::log::error(&format!("cannot schedule onto a handshake's thread: {e}"));
        }
    }
}

impl Drop for ParkedHello {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        // Never while a panic unwinds (see guard::defer), never off its thread.
        guard::defer(move || {
            let home = shared.home;
            let _ = crate::sched::run_on(home, move || {
                if shared.claim() {
                    shared.cancel_timer();
                    crate::log::error("parked handshake dropped unresolved: it goes on");
                    // SAFETY: claimed here, on its home thread, within its
                    // deadline: still parked, so alive; resolved once.
                    unsafe {
                        restore_inactivity_timeout(shared.vc);
                        reenable(shared.vc, false);
                    }
                }
            });
        });
    }
}

/// A parked handshake on its own thread, claimed: the only way to resolve
/// it. Not `Send`, and borrowed for the call that received it. Dropped
/// unresolved, the handshake goes on.
pub struct HomeHello<'a> {
    shared: Arc<Shared>,
    resolved: bool,
    _here: ThreadBound<'a>,
}

impl HomeHello<'_> {
    fn new(shared: Arc<Shared>) -> Self {
        HomeHello {
            shared,
            resolved: false,
            _here: thread_bound(),
        }
    }

    /// The connection, until it is resolved.
    pub fn vconn(&self) -> VConn<'_> {
        VConn {
            ptr: self.shared.vc,
            _life: PhantomData,
        }
    }

    /// True if the client gave up while parked (see [`ParkedHello::client_gone`]).
    pub fn client_gone(&self) -> bool {
        self.shared.fd.is_some_and(crate::net::peer_gone)
    }

    /// The handshake goes on.
    pub fn resume(mut self) -> Done {
        self.resolved = true;
        // SAFETY: a HomeHello is claimed, on its home thread, within its
        // deadline (still parked, so alive); consuming it resolves it once.
        unsafe {
            restore_inactivity_timeout(self.shared.vc);
            reenable(self.shared.vc, false);
        }
        Done::new()
    }

    /// The handshake fails, at its next TLS hook (SERVERNAME): re-enabled
    /// with an error from outside its hook, ATS would leave it waiting for
    /// client bytes that never come.
    pub fn refuse(mut self) -> Done {
        self.resolved = true;
        // SAFETY: as in `resume`.
        unsafe { restore_inactivity_timeout(self.shared.vc) };
        match MARKS.get() {
            Some(m) => {
                m.mark_refused(self.vconn());
                // SAFETY: as in `resume`.
                unsafe { reenable(self.shared.vc, false) };
            }
            // SAFETY: as in `resume`.
            None => unsafe { reenable(self.shared.vc, true) },
        }
        Done::new()
    }
}

impl Drop for HomeHello<'_> {
    fn drop(&mut self) {
        if self.resolved {
            return;
        }
        self.resolved = true;
        // On this thread: guard::defer runs it before the callback returns.
        let vc = self.shared.vc;
        guard::defer(move || {
            crate::log::error("handshake dropped unresolved: it goes on");
            // SAFETY: as in `resume`: claimed and unresolved, on its thread.
            unsafe {
                restore_inactivity_timeout(vc);
                reenable(vc, false);
            }
        });
    }
}
