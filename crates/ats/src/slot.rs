//! Per-transaction and per-session state, dropped when ATS closes the
//! transaction (TXN_CLOSE) or session (SSN_CLOSE).
//!
//! The state is a `Box<T>` stored in a TS user argument. Putting a resource
//! guard in it (a concurrency permit, an in-flight counter) makes "release
//! exactly once, whatever the outcome" a property of `Drop`: TXN_CLOSE fires
//! for aborted, failed and errored transactions alike. There is no `take`:
//! a value is only ever dropped by the reaper, so a `&T` handed out by `get`
//! for the duration of a callback can never dangle; state that changes over
//! a transaction's life uses interior mutability.

use std::ffi::{c_int, c_void, CString};
use std::marker::PhantomData;

use crate::cont::{HookCont, HookHandler};
use crate::txn::{Done, Hook, HookId, Ssn, SsnHook, Txn};
use crate::{log::to_cstring, sys};

/// Where a slot's values live.
#[derive(Clone, Copy)]
enum Scope {
    Txn,
    Ssn,
}

impl Scope {
    fn sys(self) -> sys::TSUserArgType {
        match self {
            Scope::Txn => sys::TSUserArgType::TS_USER_ARGS_TXN,
            Scope::Ssn => sys::TSUserArgType::TS_USER_ARGS_SSN,
        }
    }
}

fn reserve(scope: Scope, name: &str) -> Result<c_int, String> {
    let cname: CString = to_cstring(name);
    let mut idx: c_int = -1;
    // A reloaded copy of the .so reuses the index its predecessor reserved
    // under the same name instead of leaking one per reload.
    // SAFETY: valid C string and out pointer; description out may be null.
    let found = unsafe {
        sys::TSUserArgIndexNameLookup(scope.sys(), cname.as_ptr(), &mut idx, std::ptr::null_mut())
    };
    if found == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        return Ok(idx);
    }
    // SAFETY: valid C strings and out pointer.
    let rc = unsafe {
        sys::TSUserArgIndexReserve(scope.sys(), cname.as_ptr(), cname.as_ptr(), &mut idx)
    };
    if rc == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        Ok(idx)
    } else {
        Err(format!(
            "TSUserArgIndexReserve({name}) failed: no free user argument slots"
        ))
    }
}

/// Drops whatever a slot holds when the transaction/session closes.
struct Reaper<T> {
    idx: c_int,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> HookHandler for Reaper<T> {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        // SAFETY: the slot at idx only ever holds a Box<T> set by TxnSlot::<T>::set.
        drop(unsafe { take_raw::<T>(hook.txn().as_ptr().cast(), self.idx) });
        hook.resume()
    }

    fn on_ssn(&self, hook: SsnHook<'_>) -> Done {
        // SAFETY: as above, for SsnSlot::<T>.
        drop(unsafe { take_raw::<T>(hook.ssn().as_ptr().cast(), self.idx) });
        hook.resume()
    }
}

/// # Safety
/// `obj` must be a live txn/ssn and slot `idx` on it must hold null or a `Box<T>`.
unsafe fn take_raw<T>(obj: *mut c_void, idx: c_int) -> Option<Box<T>> {
    // SAFETY: per the contract.
    let p = unsafe { sys::TSUserArgGet(obj, idx) };
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract; clearing first makes the take happen once.
    unsafe { sys::TSUserArgSet(obj, idx, std::ptr::null_mut()) };
    // SAFETY: p came from Box::<T>::into_raw in set().
    Some(unsafe { Box::from_raw(p.cast::<T>()) })
}

/// A typed per-transaction slot. Create one per state type at plugin init.
pub struct TxnSlot<T> {
    idx: c_int,
    reaper: HookCont,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> TxnSlot<T> {
    /// Reserves the slot; `name` should be unique to the plugin (e.g. "rate_limit").
    pub fn new(name: &str) -> Result<Self, String> {
        let idx = reserve(Scope::Txn, name)?;
        let reaper = HookCont::new(Reaper::<T> {
            idx,
            _t: PhantomData,
        })?;
        Ok(TxnSlot {
            idx,
            reaper,
            _t: PhantomData,
        })
    }

    /// Stores `value` for the transaction; it is dropped at TXN_CLOSE. If the slot is occupied (the plugin twice in one remap
    /// chain), the value is handed back.
    pub fn set(&self, txn: Txn<'_>, value: Box<T>) -> Result<(), Box<T>> {
        let obj: *mut c_void = txn.as_ptr().cast();
        // SAFETY: live txn, reserved index.
        if !unsafe { sys::TSUserArgGet(obj, self.idx) }.is_null() {
            return Err(value);
        }
        // SAFETY: live txn, reserved index; ownership moves into the slot until
        // the reaper reclaims it.
        unsafe { sys::TSUserArgSet(obj, self.idx, Box::into_raw(value).cast()) };
        txn.hook(HookId::TxnClose, &self.reaper);
        Ok(())
    }

    /// The state stored for the transaction, if any.
    pub fn get<'t>(&self, txn: Txn<'t>) -> Option<&'t T> {
        // SAFETY: live txn; the slot holds null or a Box<T> owned until TXN_CLOSE,
        // which cannot happen while a callback holding `txn` runs.
        let p = unsafe { sys::TSUserArgGet(txn.as_ptr().cast(), self.idx) };
        // SAFETY: see above.
        (!p.is_null()).then(|| unsafe { &*p.cast::<T>() })
    }
}

/// A typed per-session slot, dropped at SSN_CLOSE.
pub struct SsnSlot<T> {
    idx: c_int,
    reaper: HookCont,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> SsnSlot<T> {
    pub fn new(name: &str) -> Result<Self, String> {
        let idx = reserve(Scope::Ssn, name)?;
        let reaper = HookCont::new(Reaper::<T> {
            idx,
            _t: PhantomData,
        })?;
        Ok(SsnSlot {
            idx,
            reaper,
            _t: PhantomData,
        })
    }

    /// Stores `value` for the session; dropped at SSN_CLOSE. Hands the value
    /// back if the slot is occupied.
    pub fn set(&self, ssn: Ssn<'_>, value: Box<T>) -> Result<(), Box<T>> {
        let obj: *mut c_void = ssn.as_ptr().cast();
        // SAFETY: live session, reserved index.
        if !unsafe { sys::TSUserArgGet(obj, self.idx) }.is_null() {
            return Err(value);
        }
        // SAFETY: as in TxnSlot::set.
        unsafe { sys::TSUserArgSet(obj, self.idx, Box::into_raw(value).cast()) };
        ssn.hook(HookId::SsnClose, &self.reaper);
        Ok(())
    }

    pub fn get<'s>(&self, ssn: Ssn<'s>) -> Option<&'s T> {
        // SAFETY: live session; the slot holds null or a Box<T> owned until SSN_CLOSE.
        let p = unsafe { sys::TSUserArgGet(ssn.as_ptr().cast(), self.idx) };
        // SAFETY: see above.
        (!p.is_null()).then(|| unsafe { &*p.cast::<T>() })
    }
}
