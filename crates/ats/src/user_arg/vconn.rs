//! Per-connection values: [`VConnData`] (dropped at VCONN_CLOSE) and the
//! connection's start time ([`StartStamp`], set at VCONN_START).
//!
//! Connections have no per-object hooks: both are global hooks, run for
//! every TLS connection of the process once registered.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::{arg_get, arg_set, ours, reserve, stamped, take_raw, Scope};
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
    fn on(&self, vc: VConn<'_>) {
        // SAFETY: this argument stores only Stamped<T> (VConnData::<T>::set).
        drop(unsafe { take_raw::<T>(Scope::VConn, vc.as_ptr().cast(), self.idx) });
    }
}

/// When each TLS connection started (VCONN_START), kept in a user argument
/// as a number, never a pointer: milliseconds since [`StartStamp`] was made,
/// shifted left with the low bit set, so null still means "not stamped".
pub(crate) struct StartStamp {
    idx: c_int,
    epoch: Instant,
}

impl StartStamp {
    /// Reserves `name` and hooks VCONN_START (once per process).
    pub(crate) fn new(name: &str) -> Result<&'static StartStamp, String> {
        let idx = reserve(Scope::VConn, name)?;
        // Leaked: the hook holds it for the life of the process.
        let stamp: &'static StartStamp = Box::leak(Box::new(StartStamp {
            idx,
            epoch: Instant::now(),
        }));
        add_conn_hook(sys::TSHttpHookID::TS_VCONN_START_HOOK, Stamper(stamp))?;
        Ok(stamp)
    }

    /// How long ago `vc` started; `None` if it was not stamped (it started
    /// before the hook was added).
    pub(crate) fn age(&self, vc: VConn<'_>) -> Option<Duration> {
        // SAFETY: live connection, reserved index; the value is a number.
        let v = unsafe { arg_get(Scope::VConn, vc.as_ptr().cast(), self.idx) } as usize;
        if v & 1 == 0 {
            return None;
        }
        let started = Duration::from_millis((v >> 1) as u64);
        Some(self.epoch.elapsed().saturating_sub(started))
    }
}

struct Stamper(&'static StartStamp);

impl ConnHook for Stamper {
    fn on(&self, vc: VConn<'_>) {
        let ms = self.0.epoch.elapsed().as_millis() as usize;
        let v = (ms << 1) | 1;
        // SAFETY: live connection at VCONN_START, reserved index; the value is
        // never dereferenced or freed (see StartStamp).
        unsafe {
            arg_set(
                Scope::VConn,
                vc.as_ptr().cast(),
                self.0.idx,
                v as *mut c_void,
            )
        };
    }
}
