//! The user arguments themselves: an index reserved by name, read and
//! written (9.2's fast getters, 10.x's `TSUserArg*`), and the boxes stored
//! in them, stamped with the copy of the plugin that stored them. Shared by
//! `TxnData`/`SsnData` (user_arg.rs), the transaction values (values.rs),
//! and `VConnData` and the connection marks (vconn.rs).

use std::ffi::{c_int, c_void, CString};

use crate::{log::to_cstring, sys};

/// Identifies this loaded copy of the plugin. With ATS's dynamic reload a
/// replaced .so is loaded again beside the old one; both reserve the same
/// user-argument index by name, and a session can meet both copies. A value
/// is only ever read or dropped by the copy that stored it.
static COPY_MARK: u8 = 0;

pub(super) fn copy_id() -> usize {
    &COPY_MARK as *const u8 as usize
}

/// A stored value: the copy id first (same offset in every copy), then the value.
#[repr(C)]
pub(super) struct Stamped<T> {
    pub(super) copy: usize,
    pub(super) value: T,
}

/// The value in user argument `idx` of `obj` if this copy stored it.
///
/// # Safety
/// `obj` must be a live txn/ssn whose user argument `idx` holds null or a
/// `Box<Stamped<_>>` (of this or another copy of the plugin).
pub(super) unsafe fn ours<'a, T>(
    scope: Scope,
    obj: *mut c_void,
    idx: c_int,
) -> Option<&'a Stamped<T>> {
    // SAFETY: per the contract.
    let p = unsafe { arg_get(scope, obj, idx) };
    if p.is_null() {
        return None;
    }
    // SAFETY: every copy stores a repr(C) Stamped whose first field is the copy id.
    let copy = unsafe { *p.cast::<usize>() };
    // SAFETY: the copy id says this copy stored a Stamped<T> there.
    (copy == copy_id()).then(|| unsafe { &*p.cast::<Stamped<T>>() })
}

/// Reads user argument `idx` of a live txn or ssn. 9.2's
/// `TSHttpTxnArgGet`/`TSHttpSsnArgGet` read the same storage as
/// `TSUserArgGet` without its `__dynamic_cast`: about 20 instructions
/// instead of 540 (callgrind, BENCHMARKS.md). 10.x removed them.
///
/// # Safety
/// `obj` is a live object of `scope`'s kind; `idx` was reserved for it.
pub(super) unsafe fn arg_get(scope: Scope, obj: *mut c_void, idx: c_int) -> *mut c_void {
    #[cfg(ats_9)]
    // SAFETY: per the contract; the casts only restate the handle's type.
    unsafe {
        match scope {
            Scope::Txn => sys::TSHttpTxnArgGet(obj.cast(), idx),
            Scope::Ssn => sys::TSHttpSsnArgGet(obj.cast(), idx),
            Scope::VConn => sys::TSVConnArgGet(obj.cast(), idx),
        }
    }
    #[cfg(ats_10)]
    {
        let _ = scope;
        // SAFETY: per the contract.
        unsafe { sys::TSUserArgGet(obj, idx) }
    }
}

/// Writes user argument `idx`; see [`arg_get`].
///
/// # Safety
/// As for [`arg_get`].
pub(super) unsafe fn arg_set(scope: Scope, obj: *mut c_void, idx: c_int, value: *mut c_void) {
    #[cfg(ats_9)]
    // SAFETY: per the contract.
    unsafe {
        match scope {
            Scope::Txn => sys::TSHttpTxnArgSet(obj.cast(), idx, value),
            Scope::Ssn => sys::TSHttpSsnArgSet(obj.cast(), idx, value),
            Scope::VConn => sys::TSVConnArgSet(obj.cast(), idx, value),
        }
    }
    #[cfg(ats_10)]
    {
        let _ = scope;
        // SAFETY: per the contract.
        unsafe { sys::TSUserArgSet(obj, idx, value) }
    }
}

/// Where a user argument's values live.
#[derive(Clone, Copy)]
pub(super) enum Scope {
    Txn,
    Ssn,
    /// A client connection (TLS hooks; see [`crate::VConnData`]).
    VConn,
}

impl Scope {
    fn sys(self) -> sys::TSUserArgType {
        match self {
            Scope::Txn => sys::TSUserArgType::TS_USER_ARGS_TXN,
            Scope::Ssn => sys::TSUserArgType::TS_USER_ARGS_SSN,
            Scope::VConn => sys::TSUserArgType::TS_USER_ARGS_VCONN,
        }
    }
}

pub(super) fn reserve(scope: Scope, name: &str) -> Result<c_int, String> {
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

/// Takes this copy's value out of the user argument (another copy's is left alone).
///
/// # Safety
/// As for [`ours`], with `T` the type this copy stores at `idx`.
pub(super) unsafe fn take_raw<T>(
    scope: Scope,
    obj: *mut c_void,
    idx: c_int,
) -> Option<Box<Stamped<T>>> {
    // SAFETY: per the contract.
    let p: *const Stamped<T> = unsafe { ours::<T>(scope, obj, idx) }?;
    // SAFETY: clearing first makes the take happen once.
    unsafe { arg_set(scope, obj, idx, std::ptr::null_mut()) };
    // SAFETY: p came from Box::<Stamped<T>>::into_raw in set().
    Some(unsafe { Box::from_raw(p.cast_mut()) })
}

pub(super) fn stamped<T>(value: T) -> *mut Stamped<T> {
    Box::into_raw(Box::new(Stamped {
        copy: copy_id(),
        value,
    }))
}
