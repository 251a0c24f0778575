//! Per-connection values: [`VConnData`] (dropped at VCONN_CLOSE) and each
//! connection's marks ([`ConnMarks`]: its start, a refusal to carry out).
//!
//! Connections have no per-object hooks: both are global hooks, run for
//! every TLS connection of the process once registered.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::raw::{arg_get, arg_set, ours, reserve, stamped, take_raw, Scope};
use crate::sys;
use crate::vconn::{add_conn_hook, ConnHook, VConn};

/// Per-connection state of type `T` in a user argument, dropped when the
/// connection closes (the global VCONN_CLOSE hook). Like [`super::TxnData`],
/// a value is only ever dropped by the close hook, so a `&T` handed out
/// for a callback never dangles. Create one per state type at plugin init.
pub struct VConnData<T> {
    idx: c_int,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> VConnData<T> {
    /// Reserves the user argument and hooks VCONN_CLOSE, for the life of
    /// the process (a global hook cannot be removed): call once.
    pub fn new(name: &str) -> Result<Self, String> {
        let idx = reserve(Scope::VConn, name)?;
        add_conn_hook(
            sys::TSHttpHookID::TS_VCONN_CLOSE_HOOK,
            Reaper::<T> {
                idx,
                _t: PhantomData,
            },
        )?;
        Ok(VConnData {
            idx,
            _t: PhantomData,
        })
    }

    /// Stores `value` for the connection; dropped at VCONN_CLOSE. Hands the
    /// value back if the connection holds one already.
    pub fn set(&self, vc: VConn<'_>, value: T) -> Result<(), T> {
        let obj: *mut c_void = vc.as_ptr().cast();
        // SAFETY: a live connection (the callback's), reserved index.
        if !unsafe { arg_get(Scope::VConn, obj, self.idx) }.is_null() {
            return Err(value);
        }
        // SAFETY: as above; the box is taken back by the reaper only.
        unsafe { arg_set(Scope::VConn, obj, self.idx, stamped(value).cast()) };
        Ok(())
    }

    /// This copy's value for the connection, if any.
    pub fn get<'v>(&self, vc: VConn<'v>) -> Option<&'v T> {
        // SAFETY: live connection; the argument holds null or a stamped box
        // owned until VCONN_CLOSE, after every callback holding `vc`.
        unsafe { ours::<T>(Scope::VConn, vc.as_ptr().cast(), self.idx) }.map(|t| &t.value)
    }
}

/// Drops a connection's value at VCONN_CLOSE.
struct Reaper<T> {
    idx: c_int,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> ConnHook for Reaper<T> {
    fn on(&self, vc: VConn<'_>) -> bool {
        // SAFETY: this argument stores only Stamped<T> (VConnData::<T>::set).
        drop(unsafe { take_raw::<T>(Scope::VConn, vc.as_ptr().cast(), self.idx) });
        true
    }
}

/// Marks on each TLS connection, kept in a user argument as a number,
/// never a pointer: when it started (VCONN_START), and whether a parked
/// handshake is to be refused at its next TLS hook. The value is
/// milliseconds since [`ConnMarks`] was made, shifted left by two, with
/// bit 0 set (so null still means "not stamped") and bit 1 the refusal.
pub(crate) struct ConnMarks {
    idx: c_int,
    epoch: Instant,
}

const STAMPED: usize = 1;
const REFUSE: usize = 2;

impl ConnMarks {
    /// Reserves `name` and hooks VCONN_START (to stamp) and SERVERNAME (to
    /// carry out a refusal), once per process.
    pub(crate) fn new(name: &str) -> Result<&'static ConnMarks, String> {
        let idx = reserve(Scope::VConn, name)?;
        // Leaked: the hooks hold it for the life of the process.
        let marks: &'static ConnMarks = Box::leak(Box::new(ConnMarks {
            idx,
            epoch: Instant::now(),
        }));
        add_conn_hook(sys::TSHttpHookID::TS_VCONN_START_HOOK, Stamper(marks))?;
        add_conn_hook(sys::TSHttpHookID::TS_SSL_SERVERNAME_HOOK, Refuser(marks))?;
        Ok(marks)
    }

    fn get(&self, vc: VConn<'_>) -> usize {
        // SAFETY: live connection, reserved index; the value is a number.
        unsafe { arg_get(Scope::VConn, vc.as_ptr().cast(), self.idx) as usize }
    }

    fn set(&self, vc: VConn<'_>, v: usize) {
        // SAFETY: live connection on its own thread, reserved index; the
        // value is never dereferenced or freed.
        unsafe { arg_set(Scope::VConn, vc.as_ptr().cast(), self.idx, v as *mut c_void) };
    }

    /// How long ago `vc` started; `None` if it was not stamped (it started
    /// before the hook was added).
    pub(crate) fn age(&self, vc: VConn<'_>) -> Option<Duration> {
        let v = self.get(vc);
        if v & STAMPED == 0 {
            return None;
        }
        let started = Duration::from_millis((v >> 2) as u64);
        Some(self.epoch.elapsed().saturating_sub(started))
    }

    /// The handshake is to fail at its next TLS hook (SERVERNAME), where an
    /// error takes effect; see `crate::vconn` on why not at once.
    pub(crate) fn mark_refused(&self, vc: VConn<'_>) {
        self.set(vc, self.get(vc) | REFUSE);
    }
}

struct Stamper(&'static ConnMarks);

impl ConnHook for Stamper {
    fn on(&self, vc: VConn<'_>) -> bool {
        let ms = self.0.epoch.elapsed().as_millis() as usize;
        self.0.set(vc, (ms << 2) | STAMPED);
        true
    }
}

/// Fails the handshakes marked refused (see [`ConnMarks::mark_refused`]).
struct Refuser(&'static ConnMarks);

impl ConnHook for Refuser {
    fn on(&self, vc: VConn<'_>) -> bool {
        self.0.get(vc) & REFUSE == 0
    }
}
