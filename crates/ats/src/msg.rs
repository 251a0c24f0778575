//! `traffic_ctl plugin msg TAG DATA`: ATS's lifecycle message hook.
//!
//! In 9.2 traffic_manager forwards the message to traffic_server's
//! management thread, which calls every `TS_LIFECYCLE_MSG_HOOK` continuation
//! in turn. Three facts shape this module:
//! - the hook try-locks the continuation's mutex and aborts the server if
//!   another thread holds it, so the continuation gets a mutex of its own
//!   that nothing else ever takes;
//! - a lifecycle hook cannot be removed, and a replaced .so is loaded as a
//!   second copy: registration is once per process, marked by a global user
//!   argument reserved under the handler's name, which every copy finds;
//! - 9.2 counts the trailing NUL in `data_size`: data is bytes, and one
//!   trailing NUL is dropped.
//!
//! The handler runs on the management thread (an ATS thread, so it may
//! schedule work); it must be quick and defer real work to a task thread.

use std::ffi::{c_int, c_void, CStr};

use crate::{guard, log::to_cstring, sys};

/// Handles plugin messages.
pub trait MsgHandler: Send + Sync + 'static {
    /// One message: its tag (`rate_limit`, `rate_limit.show`, …, for every
    /// plugin's tags alike: ignore others) and its data.
    fn on_msg(&self, tag: &str, data: &[u8]);
}

/// Registers `handler` for plugin messages, once per process under `name`.
/// `Ok(false)`: a copy of this plugin registered already, and keeps
/// answering (ATS keeps a .so loaded while its continuations live).
pub fn register<H: MsgHandler>(name: &str, handler: H) -> Result<bool, String> {
    let cname = to_cstring(name);
    let mut idx: c_int = -1;
    // SAFETY: valid C string and out pointer; description out may be null.
    let found = unsafe {
        sys::TSUserArgIndexNameLookup(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            cname.as_ptr(),
            &mut idx,
            std::ptr::null_mut(),
        )
    };
    if found == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        return Ok(false);
    }
    // SAFETY: valid C strings and out pointer.
    let rc = unsafe {
        sys::TSUserArgIndexReserve(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            cname.as_ptr(),
            cname.as_ptr(),
            &mut idx,
        )
    };
    if rc != sys::TSReturnCode::TS_SUCCESS {
        return Err(format!(
            "cannot mark the {name} message handler (no free global user argument)"
        ));
    }
    // SAFETY: no preconditions.
    let mutex = unsafe { sys::TSMutexCreate() };
    // SAFETY: valid handler; the continuation owns its private mutex.
    let cont = unsafe { sys::TSContCreate(Some(trampoline::<H>), mutex) };
    if cont.is_null() {
        return Err("TSContCreate failed".into());
    }
    // Never freed: the hook lives as long as the process.
    let data = Box::into_raw(Box::new(handler));
    // SAFETY: live continuation; data outlives it.
    unsafe {
        sys::TSContDataSet(cont, data.cast());
        sys::TSLifecycleHookAdd(sys::TSLifecycleHookID::TS_LIFECYCLE_MSG_HOOK, cont);
    }
    Ok(true)
}

unsafe extern "C" fn trampoline<H: MsgHandler>(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    if ev != sys::TSEvent::TS_EVENT_LIFECYCLE_MSG || edata.is_null() {
        return 0;
    }
    guard::catch(
        "plugin message handler",
        || (),
        || {
            // SAFETY: for TS_EVENT_LIFECYCLE_MSG edata is a TSPluginMsg valid for the call.
            let msg = unsafe { &*edata.cast::<sys::TSPluginMsg>() };
            // SAFETY: tag is a NUL-terminated string owned by ATS for the call.
            let tag = (!msg.tag.is_null()).then(|| unsafe { CStr::from_ptr(msg.tag) });
            let Some(tag) = tag.and_then(|t| t.to_str().ok()) else {
                return;
            };
            let data: &[u8] = if msg.data.is_null() || msg.data_size == 0 {
                &[]
            } else {
                // SAFETY: data points to data_size bytes owned by ATS for the call.
                unsafe { std::slice::from_raw_parts(msg.data.cast::<u8>(), msg.data_size) }
            };
            let data = data.strip_suffix(&[0]).unwrap_or(data);
            // SAFETY: the data pointer was set in register() to a leaked Box<H>.
            let handler = unsafe { &*sys::TSContDataGet(cont).cast::<H>() };
            handler.on_msg(tag, data);
        },
    );
    0
}
