//! Process-wide named slots (global user arguments): how copies of our
//! plugins (another build, or the same .so loaded again by a reload) find
//! what an earlier copy set up. ATS loads plugins one load at a time (at
//! startup on its main thread; each remap reload on a task thread, in
//! order under its reconfiguration mutex), so a lookup and the reserve that
//! follows it do not race with another copy's: call them only from a
//! plugin's init.

use std::ffi::{c_int, c_void, CStr};

use crate::sys;

/// The value of the global user argument `name`, if one was reserved: a
/// null pointer if it was never set.
pub(crate) fn lookup(name: &CStr) -> Option<*mut c_void> {
    let mut idx: c_int = -1;
    // SAFETY: valid C string and out pointer; the description out may be null.
    let found = unsafe {
        sys::TSUserArgIndexNameLookup(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            name.as_ptr(),
            &mut idx,
            std::ptr::null_mut(),
        )
    };
    if found != sys::TSReturnCode::TS_SUCCESS || idx < 0 {
        return None;
    }
    // SAFETY: a global user argument (no object), found by name.
    Some(unsafe { sys::TSUserArgGet(std::ptr::null_mut(), idx) })
}

/// Reserves the global user argument `name` and sets it to `value`;
/// `false` if ATS has no free one.
pub(crate) fn publish(name: &CStr, value: *mut c_void) -> bool {
    let mut idx: c_int = -1;
    // SAFETY: valid C strings and out pointer.
    let rc = unsafe {
        sys::TSUserArgIndexReserve(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            name.as_ptr(),
            name.as_ptr(),
            &mut idx,
        )
    };
    if rc != sys::TSReturnCode::TS_SUCCESS || idx < 0 {
        return false;
    }
    // SAFETY: a global user argument (no object) reserved above; what
    // `value` points to is the caller's promise (see each caller).
    unsafe { sys::TSUserArgSet(std::ptr::null_mut(), idx, value) };
    true
}
