//! Traffic Server's configuration: reading a record, and rereading a
//! plugin's own file on `traffic_ctl config reload`.

use std::ffi::{c_int, c_void};
use std::path::Path;

use crate::{guard, log::to_cstring, sys};

/// An integer record (`proxy.config.…`), as Traffic Server holds it now.
pub fn record_int(name: &str) -> Option<i64> {
    let c = to_cstring(name);
    let mut v: sys::TSMgmtInt = 0;
    // SAFETY: a NUL-terminated name and a valid out pointer.
    let rc = unsafe { sys::TSMgmtIntGet(c.as_ptr(), &mut v) };
    (rc == sys::TSReturnCode::TS_SUCCESS).then_some(v)
}

/// Runs `reload` on a task thread at every `traffic_ctl config reload`
/// (10.x: only when `file` changed since the last time). For the life of
/// the process: call once.
pub fn on_config_reload(
    plugin: &str,
    file: &Path,
    reload: impl Fn() + Send + Sync + 'static,
) -> Result<(), String> {
    let handler: Box<dyn Fn() + Send + Sync> = Box::new(reload);
    // SAFETY: no preconditions.
    let mutex = unsafe { sys::TSMutexCreate() };
    // SAFETY: a valid handler; the continuation owns its private mutex,
    // which serialises reloads.
    let cont = unsafe { sys::TSContCreate(Some(reload_trampoline), mutex) };
    if cont.is_null() {
        return Err("TSContCreate failed".into());
    }
    // Never freed: the registration lasts as long as the process.
    let data = Box::into_raw(Box::new(handler));
    let name = to_cstring(plugin);
    // SAFETY: live continuation; ATS copies the name (and the path).
    unsafe {
        sys::TSContDataSet(cont, data.cast());
        #[cfg(ats_9)]
        {
            // 9.2 calls every registration on every reload.
            let _ = file;
            sys::TSMgmtUpdateRegister(cont, name.as_ptr());
        }
        #[cfg(ats_10)]
        {
            let path = to_cstring(&file.display().to_string());
            sys::TSMgmtUpdateRegister(cont, name.as_ptr(), path.as_ptr());
        }
    }
    Ok(())
}

unsafe extern "C" fn reload_trampoline(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    _edata: *mut c_void,
) -> c_int {
    if ev != sys::TSEvent::TS_EVENT_MGMT_UPDATE {
        return 0;
    }
    // SAFETY: the data is the leaked box of on_config_reload, never freed.
    let reload = unsafe { &*sys::TSContDataGet(cont).cast::<Box<dyn Fn() + Send + Sync>>() };
    guard::catch("configuration reload", || (), reload);
    0
}
