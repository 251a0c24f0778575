//! Client connections at the TLS client hello, through global hooks.
//!
//! At `TS_SSL_CLIENT_HELLO_HOOK` ATS suspends the handshake until the
//! plugin re-enables the connection: to go on, or with an error, which
//! fails the handshake. As with transactions ([`crate::Hook`]), the handler
//! gets a [`ClientHello`] it must resolve exactly once: [`ClientHello::resume`],
//! [`ClientHello::refuse`] or [`ClientHello::park`]. An unresolved one (the
//! handler panicked) is resumed once the guard has stopped the unwind: a
//! fault in a limiter must not fail every TLS handshake of the proxy.
//!
//! A parked handshake is a [`ParkedHello`] token that may travel to any
//! thread; the connection is re-enabled only on its own thread, through
//! [`ParkedHello::on_home`] and the [`HomeHello`] it hands out there.
//!
//! **A parked handshake always has a deadline.** ATS closes a connection
//! whose handshake outlives `proxy.config.ssl.handshake_timeout_in` (else
//! `proxy.config.net.default_inactivity_timeout`), counted from its start,
//! and it does not tell the hook the handshake is parked at (9.2 and 10.1
//! walk that hook's list instead of the close hooks): a re-enable after
//! that would touch a freed connection. So [`ClientHello::park`] arms a
//! timer that resolves the handshake (as the caller says) a second before
//! that timeout, whatever the caller's own deadline; the start is stamped
//! at VCONN_START, which [`hook_client_hello`] also hooks.
//!
//! **A parked handshake is refused at the next hook.** Re-enabled with an
//! error from outside its hook, a handshake is marked failed but not
//! driven: ATS waits for client bytes that never come (9.2 and 10.1). So
//! [`HomeHello::refuse`] marks the connection and lets the handshake go on
//! to SERVERNAME, the next TLS hook, where the error takes effect at once:
//! the client gets an alert before any certificate is sent.

use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::marker::PhantomData;
use std::net::IpAddr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::event_thread::EventThread;
use crate::sched::Timer;
use crate::txn::Done;
use crate::user_arg::ConnMarks;
use crate::{guard, sys};

/// A client connection, valid for the callback that received it (`'a`).
#[derive(Clone, Copy)]
pub struct VConn<'a> {
    ptr: NonNull<sys::tsapi_cont>,
    _life: PhantomData<&'a ()>,
}

impl<'a> VConn<'a> {
    /// # Safety
    /// `ptr` must be a live connection for `'a`.
    unsafe fn from_raw(ptr: *mut c_void) -> Option<VConn<'a>> {
        NonNull::new(ptr.cast()).map(|ptr| VConn {
            ptr,
            _life: PhantomData,
        })
    }

    pub(crate) fn as_ptr(self) -> sys::TSVConn {
        self.ptr.as_ptr()
    }

    /// The server name the client asked for (SNI), as the client sent it:
    /// any bytes. `None` without one (or on a connection that is not TLS).
    pub fn sni(self) -> Option<&'a [u8]> {
        let mut len: c_int = 0;
        // SAFETY: live connection; valid out pointer. ATS returns null or a
        // NUL-terminated name the connection owns (10.x leaves `len` alone
        // on a connection without TLS, hence its 0 start).
        let p = unsafe { sys::TSVConnSslSniGet(self.as_ptr(), &mut len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: NUL-terminated (see above), alive with the connection.
        let name = unsafe { CStr::from_ptr(p) }.to_bytes();
        Some(name).filter(|n| !n.is_empty())
    }

    /// The client's address: on a PROXY protocol port (10.x), the header's
    /// source; otherwise the connection's remote address (which 9.2 already
    /// replaces by the header's source).
    pub fn client_ip(self) -> Option<IpAddr> {
        #[cfg(ats_10)]
        if let Some(ip) = self.proxy_protocol_source() {
            return Some(ip);
        }
        // SAFETY: live connection; ATS returns its own sockaddr or null.
        let sa = unsafe { sys::TSNetVConnRemoteAddrGet(self.as_ptr()) };
        // SAFETY: the sockaddr lives with the connection.
        unsafe { crate::net::ip_from_sockaddr(sa.cast()) }
    }

    #[cfg(ats_10)]
    fn proxy_protocol_source(self) -> Option<IpAddr> {
        let key = u16::try_from(sys::TSVConnPPInfoKey::TS_PP_INFO_SRC_ADDR.0).ok()?;
        let mut value: *const std::ffi::c_char = std::ptr::null();
        let mut len: c_int = 0;
        // SAFETY: live connection; valid out pointers; on success ATS points
        // `value` at the connection's own sockaddr of `len` bytes.
        let rc = unsafe { sys::TSVConnPPInfoGet(self.as_ptr(), key, &mut value, &mut len) };
        if rc != sys::TSReturnCode::TS_SUCCESS {
            return None;
        }
        // SAFETY: ATS's sockaddr of `len` bytes, alive with the connection.
        unsafe { crate::net::ip_from_sockaddr_len(value.cast(), len) }
    }

    /// The socket, for [`ParkedHello::client_gone`]. On its own thread only.
    fn fd(self) -> Option<c_int> {
        // SAFETY: live connection on its own thread.
        let fd = unsafe { sys::TSVConnFdGet(self.as_ptr()) };
        (fd >= 0).then_some(fd)
    }
}

/// Re-enables a suspended connection: `error` fails its handshake.
fn reenable(vc: NonNull<sys::tsapi_cont>, error: bool) {
    // SAFETY: callers pass a connection suspended at a TLS hook and
    // resolve it once, on its own thread.
    unsafe {
        if error {
            sys::TSVConnReenableEx(vc.as_ptr(), sys::TSEvent::TS_EVENT_ERROR)
        } else {
            sys::TSVConnReenable(vc.as_ptr())
        }
    }
}

/// A global connection hook that decides at once (VCONN_START,
/// SERVERNAME, VCONN_CLOSE): `true` lets the connection go on, `false`
/// fails its handshake. A panic lets it go on.
pub(crate) trait ConnHook: Send + Sync + 'static {
    fn on(&self, vc: VConn<'_>) -> bool;
}

/// Adds `hook` as a global hook `id` for the life of the process.
pub(crate) fn add_conn_hook<H: ConnHook>(id: sys::TSHttpHookID, hook: H) -> Result<(), String> {
    add_global(id, conn_trampoline::<H>, hook)
}

fn add_global<H: Send + Sync + 'static>(
    id: sys::TSHttpHookID,
    handler: unsafe extern "C" fn(sys::TSCont, sys::TSEvent, *mut c_void) -> c_int,
    data: H,
) -> Result<(), String> {
    // SAFETY: a valid handler; no mutex: connection hooks run under the
    // connection's own lock, and the handler keeps no state of its own.
    let cont = unsafe { sys::TSContCreate(Some(handler), std::ptr::null_mut()) };
    if cont.is_null() {
        return Err("TSContCreate failed".into());
    }
    // Never freed: a global hook lives as long as the process.
    let data = Box::into_raw(Box::new(data));
    // SAFETY: live continuation; the data outlives it.
    unsafe {
        sys::TSContDataSet(cont, data.cast());
        sys::TSHttpHookAdd(id, cont);
    }
    Ok(())
}

unsafe extern "C" fn conn_trampoline<H: ConnHook>(
    cont: sys::TSCont,
    _ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    // SAFETY: connection hook events carry the connection.
    let Some(vc) = (unsafe { VConn::from_raw(edata) }) else {
        return 0;
    };
    // SAFETY: the data is the leaked Box<H> of add_global, never freed.
    let hook = unsafe { &*sys::TSContDataGet(cont).cast::<H>() };
    let go = guard::catch("connection hook", || true, || hook.on(vc));
    reenable(vc.ptr, !go);
    0
}

/// Handles the client hellos of every TLS connection.
pub trait ClientHelloHandler: Send + Sync + 'static {
    /// A client hello arrived: resolve `hello` (resume, refuse or park).
    fn on_client_hello(&self, hello: ClientHello<'_>) -> Done;
}

static MARKS: OnceLock<&'static ConnMarks> = OnceLock::new();

/// Hooks `handler` on every TLS client hello of the process, with
/// VCONN_START (to stamp each connection's start) and SERVERNAME (to fail
/// a parked handshake refused later): see the module's docs. Call once,
/// from `TSPluginInit`: a global hook cannot be removed. `name` names the
/// user argument of the marks (`<name>.conn_marks`).
pub fn hook_client_hello<H: ClientHelloHandler>(name: &str, handler: H) -> Result<(), String> {
    if MARKS.get().is_some() {
        return Err("the client hello is hooked already".into());
    }
    let marks = ConnMarks::new(&format!("{name}.conn_marks"))?;
    let _ = MARKS.set(marks);
    add_global(
        sys::TSHttpHookID::TS_SSL_CLIENT_HELLO_HOOK,
        hello_trampoline::<H>,
        handler,
    )
}

unsafe extern "C" fn hello_trampoline<H: ClientHelloHandler>(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    // SAFETY: TLS hook events carry the connection.
    let Some(vc) = (unsafe { VConn::from_raw(edata) }) else {
        return 0;
    };
    if ev != sys::TSEvent::TS_EVENT_SSL_CLIENT_HELLO {
        // A connection that closed while an earlier plugin's client-hello
        // hook held it arrives here as VCONN_CLOSE (ATS walks the hook list
        // it was on): nothing of ours to do but let it go on.
        reenable(vc.ptr, false);
        return 0;
    }
    // SAFETY: the data is the leaked Box<H> of add_global, never freed.
    let handler = unsafe { &*sys::TSContDataGet(cont).cast::<H>() };
    let resolved = Cell::new(false);
    guard::catch(
        "client hello hook",
        || (),
        || {
            let _done = handler.on_client_hello(ClientHello {
                vc,
                resolved: &resolved,
            });
        },
    );
    if !resolved.get() {
        crate::log::error("client hello hook did not complete: the handshake goes on");
        reenable(vc.ptr, false);
    }
    0
}

/// A handshake suspended at the client hello, to be resolved exactly once.
pub struct ClientHello<'a> {
    vc: VConn<'a>,
    resolved: &'a Cell<bool>,
}

impl<'a> ClientHello<'a> {
    /// The connection, borrowed from the hook.
    pub fn vconn(&self) -> VConn<'_> {
        self.vc
    }

    /// The handshake goes on.
    pub fn resume(self) -> Done {
        self.resolved.set(true);
        reenable(self.vc.ptr, false);
        Done::new()
    }

    /// The handshake fails: the client gets a TLS alert and the connection closes.
    pub fn refuse(self) -> Done {
        self.resolved.set(true);
        reenable(self.vc.ptr, true);
        Done::new()
    }

    /// Leaves the handshake suspended; `keep` receives the token that
    /// resolves it later. If it is still parked after `deadline` (or,
    /// sooner, a second before Traffic Server's own handshake timeout),
    /// `on_deadline` resolves it on its thread instead, and a later
    /// [`ParkedHello::on_home`] does nothing.
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
        let limit = match (deadline, ats_timeout_left(self.vc)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
        self.resolved.set(true);
        keep(ParkedHello {
            shared: Some(shared),
        });
        Done::new()
    }
}

/// What a handshake may still spend before Traffic Server's own timeout
/// closes it, less a second: `None` if it has none.
fn ats_timeout_left(vc: VConn<'_>) -> Option<Duration> {
    let secs = [
        "proxy.config.ssl.handshake_timeout_in",
        "proxy.config.net.default_inactivity_timeout",
    ]
    .into_iter()
    .filter_map(crate::mgmt::record_int)
    .find(|&s| s > 0)?;
    let age = MARKS
        .get()
        .and_then(|s| s.age(vc))
        .unwrap_or(Duration::ZERO);
    let total = Duration::from_secs(u64::try_from(secs).ok()?);
    Some(
        total
            .saturating_sub(Duration::from_secs(1))
            .saturating_sub(age),
    )
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
                    reenable(shared.vc, false);
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
    _here: PhantomData<(&'a (), *const ())>,
}

impl HomeHello<'_> {
    fn new(shared: Arc<Shared>) -> Self {
        HomeHello {
            shared,
            resolved: false,
            _here: PhantomData,
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
        reenable(self.shared.vc, false);
        Done::new()
    }

    /// The handshake fails, at its next TLS hook (SERVERNAME): re-enabled
    /// with an error from outside its hook, ATS would leave it waiting for
    /// client bytes that never come.
    pub fn refuse(mut self) -> Done {
        self.resolved = true;
        match MARKS.get() {
            Some(m) => {
                m.mark_refused(self.vconn());
                reenable(self.shared.vc, false);
            }
            None => reenable(self.shared.vc, true),
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
            reenable(vc, false);
        });
    }
}
