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
//! whose handshake outlives its timeout (`proxy.config.ssl.handshake_timeout_in`,
//! else `proxy.config.net.default_inactivity_timeout`, counted from its
//! start), and it does not tell the hook the handshake is parked at (9.2
//! and 10.1 walk that hook's list instead of the close hooks): a re-enable
//! after that would touch a freed connection. So [`ClientHello::park`] arms
//! a timer that resolves the handshake (as the caller says) a second before
//! that budget is spent, whatever the caller's own deadline (the start is
//! stamped at VCONN_START, which [`hook_client_hello`] also hooks), and
//! pushes the connection's own inactivity timeout 10 s past that deadline,
//! so ATS cannot time it out first whatever its records say meanwhile.
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
use std::sync::OnceLock;

use crate::txn::Done;
use crate::user_arg::ConnMarks;
use crate::{guard, sys};

mod park;

pub use park::{HomeHello, ParkedHello};

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
///
/// # Safety
/// `vc` is a live connection suspended at a TLS hook, resolved once, on
/// its own thread.
unsafe fn reenable(vc: NonNull<sys::tsapi_cont>, error: bool) {
    // SAFETY: per the contract.
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
    // SAFETY: the connection is suspended at this hook, on its thread; it
    // is resolved here only.
    unsafe { reenable(vc.ptr, !go) };
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
    park::read_handshake_budget();
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
        // SAFETY: suspended at this hook, on its thread, resolved here only.
        unsafe { reenable(vc.ptr, false) };
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
        // SAFETY: suspended at this hook, on its thread; the handler did
        // not resolve it (`resolved` is false).
        unsafe { reenable(vc.ptr, false) };
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
        // SAFETY: suspended at the hook running now, on its thread;
        // consuming `self` resolves it once.
        unsafe { reenable(self.vc.ptr, false) };
        Done::new()
    }

    /// The handshake fails: the client gets a TLS alert and the connection closes.
    pub fn refuse(self) -> Done {
        self.resolved.set(true);
        // SAFETY: as in `resume`.
        unsafe { reenable(self.vc.ptr, true) };
        Done::new()
    }
}
