//! The `extern "C"` remap entry points, generic over the plugin type;
//! [`crate::remap_plugin!`] exports them. A later copy of a build already
//! loaded passes each call on to the first copy (see `copies.rs`); the
//! `*_here` functions serve them in the copy that holds the rules.

use std::ffi::{c_char, c_int, c_void};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::copies::{self, Lifecycle, Table};
use super::{write_errbuf, ReloadStatus, RemapArgs, RemapPlugin, RemapRequest};
use crate::txn::Txn;
use crate::{guard, log, sys};

/// In a later copy of a build: the entry points of the copy that serves it.
static FORWARD: OnceLock<&'static Table> = OnceLock::new();
/// This copy's entry points, for later copies of its build.
static TABLE: OnceLock<Table> = OnceLock::new();
static LIFECYCLE: Mutex<Lifecycle> = Mutex::new(Lifecycle::new());

/// This copy is pinned (plugin.config): it is never unloaded, and its
/// global hooks may park, so it keeps its net threads' inboxes.
static PINNED: AtomicBool = AtomicBool::new(false);

fn lifecycle() -> MutexGuard<'static, Lifecycle> {
    LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn table<P: RemapPlugin>() -> Table {
    Table {
        new_instance: new_instance_here::<P>,
        delete_instance: delete_instance_here::<P>,
        do_remap: do_remap_here::<P>,
        pre_reload: pre_reload_here::<P>,
        post_reload: post_reload_here::<P>,
        done: done_here::<P>,
    }
}

/// # Safety
/// Called by ATS as `TSRemapInit`.
pub unsafe fn init<P: RemapPlugin>(
    api: *mut sys::TSRemapInterface,
    errbuf: *mut c_char,
    size: c_int,
) -> sys::TSReturnCode {
    log::set_plugin_name(P::NAME);
    guard::install_panic_hook();
    log::install_logger();
    let result = guard::catch(
        "TSRemapInit",
        || Err("internal error (panic) during init; see diags.log".to_owned()),
        || {
            log::note(&crate::release::loaded_line(P::NAME));
            // SAFETY: ATS passes a valid pointer or null.
            let api = unsafe { api.as_ref() }.ok_or("missing TSRemapInterface")?;
            let needed = std::mem::size_of::<sys::TSRemapInterface>();
            let version = std::ffi::c_ulong::from(sys::TSREMAP_VERSION);
            if usize::try_from(api.size).map_or(true, |s| s < needed)
                || api.tsremap_version < version
            {
                return Err(format!(
                    "incompatible remap API version {}.{} (need {}.{} or later)",
                    api.tsremap_version >> 16,
                    api.tsremap_version & 0xffff,
                    sys::TSREMAP_VMAJOR,
                    sys::TSREMAP_VMINOR
                ));
            }
            // On ATS's loading thread: copies find one registry (see there).
            crate::textlog::prepare();
            let own = TABLE.get().map(std::ptr::from_ref);
            if let Some(first) =
                copies::earlier(P::NAME).filter(|t| Some(std::ptr::from_ref(*t)) != own)
            {
                let _ = FORWARD.set(first);
                log::note(&format!(
                    "{}.so: this file is the same build as a copy already loaded: that copy \
                     serves its rules, so their state carries over reloads",
                    P::NAME
                ));
                return Ok(());
            }
            P::init()?;
            copies::publish(P::NAME, TABLE.get_or_init(table::<P>));
            Ok(())
        },
    );
    match result {
        Ok(()) => {
            log::debug(&format!("{} remap plugin initialised", P::NAME));
            sys::TSReturnCode::TS_SUCCESS
        }
        Err(msg) => {
            write_errbuf(errbuf, size, &format!("[{}] {msg}", P::NAME));
            sys::TSReturnCode::TS_ERROR
        }
    }
}

/// # Safety
/// Called by ATS as `TSRemapNewInstance`.
pub unsafe fn new_instance<P: RemapPlugin>(
    argc: c_int,
    argv: *mut *mut c_char,
    ih: *mut *mut c_void,
    errbuf: *mut c_char,
    size: c_int,
) -> sys::TSReturnCode {
    if let Some(t) = FORWARD.get() {
        // SAFETY: forwarded unchanged from ATS.
        return unsafe { (t.new_instance)(argc, argv, ih, errbuf, size) };
    }
    // SAFETY: as above.
    unsafe { new_instance_here::<P>(argc, argv, ih, errbuf, size) }
}

/// # Safety
/// ATS's `TSRemapNewInstance` contract.
unsafe extern "C" fn new_instance_here<P: RemapPlugin>(
    argc: c_int,
    argv: *mut *mut c_char,
    ih: *mut *mut c_void,
    errbuf: *mut c_char,
    size: c_int,
) -> sys::TSReturnCode {
    let result = guard::catch(
        "TSRemapNewInstance",
        || Err("internal error (panic) while parsing options; see diags.log".to_owned()),
        || {
            let argc = usize::try_from(argc).unwrap_or(0);
            let mut all = Vec::with_capacity(argc);
            for i in 0..argc {
                // SAFETY: ATS passes argc valid C strings in argv.
                let arg = unsafe { log::argv_str(*argv.add(i)) }.ok_or("null argument")?;
                let arg = arg.to_str().map_err(|_| {
                    format!(
                        "argument {} is not valid UTF-8: {}",
                        i,
                        arg.to_string_lossy()
                    )
                })?;
                all.push(arg);
            }
            if all.len() < 2 {
                return Err("remap rule passed fewer than 2 arguments (from/to URL)".to_owned());
            }
            let args = RemapArgs {
                from_url: all[0],
                to_url: all[1],
                options: all[2..].to_vec(),
            };
            P::new_instance(&args)
        },
    );
    match result {
        Ok(instance) => {
            let rule = Arc::new(instance);
            guard::catch("TSRemapNewInstance (created)", || (), || P::created(&rule));
            // SAFETY: ATS passes a valid out pointer; ownership of one Arc
            // reference goes to ATS until TSRemapDeleteInstance.
            unsafe { *ih = Arc::into_raw(rule) as *mut c_void };
            let mut l = lifecycle();
            l.made();
            // Under the lifecycle lock, so a `done` racing this cannot
            // retire the inboxes after this rule let them open.
            crate::inbox::serve();
            drop(l);
            sys::TSReturnCode::TS_SUCCESS
        }
        Err(msg) => {
            // ATS logs the errbuf itself, with the remap.config file and line.
            write_errbuf(errbuf, size, &format!("[{}] {msg}", P::NAME));
            sys::TSReturnCode::TS_ERROR
        }
    }
}

/// # Safety
/// Called by ATS as `TSRemapDeleteInstance` with a pointer from `new_instance`.
pub unsafe fn delete_instance<P: RemapPlugin>(ih: *mut c_void) {
    if let Some(t) = FORWARD.get() {
        // SAFETY: forwarded unchanged from ATS.
        return unsafe { (t.delete_instance)(ih) };
    }
    // SAFETY: as above.
    unsafe { delete_instance_here::<P>(ih) }
}

/// # Safety
/// ATS's `TSRemapDeleteInstance` contract.
unsafe extern "C" fn delete_instance_here<P: RemapPlugin>(ih: *mut c_void) {
    if ih.is_null() {
        return;
    }
    lifecycle().deleted();
    guard::catch(
        "TSRemapDeleteInstance",
        || (),
        || {
            // SAFETY: ih is the Arc reference handed to ATS in new_instance; ATS
            // gives it back exactly once.
            drop(unsafe { Arc::from_raw(ih as *const P) });
        },
    );
}

/// Called by ATS as `TSRemapPreConfigReload`.
pub fn pre_reload<P: RemapPlugin>() {
    match FORWARD.get() {
        Some(t) => (t.pre_reload)(),
        None => pre_reload_here::<P>(),
    }
}

extern "C" fn pre_reload_here<P: RemapPlugin>() {
    let tell = lifecycle().pre_reload();
    if tell {
        guard::catch("TSRemapPreConfigReload", || (), P::pre_reload);
    }
}

/// Called by ATS as `TSRemapDone`.
pub fn done<P: RemapPlugin>() {
    match FORWARD.get() {
        Some(t) => (t.done)(),
        None => done_here::<P>(),
    }
}

extern "C" fn done_here<P: RemapPlugin>() {
    let l = lifecycle();
    let done = l.done();
    if done && !PINNED.load(Ordering::Relaxed) {
        // A replaced copy leaves no socket pair behind on the net threads
        // (a pinned copy keeps them: its global hooks park too). Under the
        // lifecycle lock: see `new_instance_here`.
        crate::inbox::retire();
    }
    drop(l);
    if !done {
        log::debug(&format!(
            "{}: rules this copy made for a later copy of its build remain",
            P::NAME
        ));
        return;
    }
    log::debug(&format!("{}: the last rule of this copy is gone", P::NAME));
    guard::catch("TSRemapDone", || (), P::done);
}

/// Called by ATS as `TSRemapPostConfigReload`.
pub fn post_reload<P: RemapPlugin>(status: sys::TSRemapReloadStatus) {
    match FORWARD.get() {
        Some(t) => (t.post_reload)(status),
        None => post_reload_here::<P>(status),
    }
}

extern "C" fn post_reload_here<P: RemapPlugin>(status: sys::TSRemapReloadStatus) {
    let status = match status {
        sys::TSRemapReloadStatus::TSREMAP_CONFIG_RELOAD_SUCCESS_PLUGIN_USED => {
            ReloadStatus::Loaded { used: true }
        }
        sys::TSRemapReloadStatus::TSREMAP_CONFIG_RELOAD_SUCCESS_PLUGIN_UNUSED => {
            ReloadStatus::Loaded { used: false }
        }
        _ => ReloadStatus::Failed,
    };
    let Some(status) = lifecycle().post_reload(status) else {
        return;
    };
    guard::catch("TSRemapPostConfigReload", || (), || P::post_reload(status));
}

/// Called by ATS as `TSPluginInit` when the .so is also listed in
/// plugin.config. That load pins one copy: it opts the .so out of ATS's
/// dynamic remap reload (`TSPluginDSOReloadEnable(0)`), so remap rules use
/// this same image, with its statics, across every reload, even after the
/// file is replaced (an upgrade then needs a restart). Then the plugin's
/// own global part starts with the line's arguments
/// ([`RemapPlugin::global_init`]); if it cannot, traffic_server stops.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings (ATS's contract).
pub unsafe fn plugin_init<P: RemapPlugin>(argc: c_int, argv: *mut *const c_char) {
    log::set_plugin_name(P::NAME);
    guard::install_panic_hook();
    log::install_logger();
    let result = guard::catch(
        "TSPluginInit",
        || Err("internal error (panic) during TSPluginInit; see diags.log".to_owned()),
        || {
            log::note(&crate::release::loaded_line(P::NAME));
            crate::textlog::prepare();
            let name = std::ffi::CString::new(P::NAME).unwrap_or_default();
            let info = sys::TSPluginRegistrationInfo {
                plugin_name: name.as_ptr(),
                vendor_name: c"Apache Traffic Server Rust plugins".as_ptr(),
                support_email: c"".as_ptr(),
            };
            // SAFETY: `info` and its strings live across the call; ATS copies them.
            if unsafe { sys::TSPluginRegister(&info) } != sys::TSReturnCode::TS_SUCCESS {
                return Err("plugin registration failed".to_owned());
            }
            // SAFETY: called from TSPluginInit, the only place ATS accepts it.
            match unsafe { sys::TSPluginDSOReloadEnable(0) } {
                sys::TSReturnCode::TS_SUCCESS => {
                    PINNED.store(true, Ordering::Relaxed);
                    log::note(&format!(
                        "{}.so is pinned (listed in plugin.config): remap reloads keep this \
                         copy and its state; replacing the file takes effect at the next restart",
                        P::NAME
                    ))
                }
                _ => log::error(&format!(
                    "{}.so: TSPluginDSOReloadEnable(0) failed; remap reloads may load a \
                     second copy with separate state",
                    P::NAME
                )),
            }
            let argc = match argv.is_null() {
                true => 0,
                false => usize::try_from(argc).unwrap_or(0),
            };
            let mut args = Vec::with_capacity(argc);
            // argv[0] is the plugin's own path.
            for i in 1..argc {
                // SAFETY: ATS passes argc valid C strings in argv.
                let arg = unsafe { log::argv_str(*argv.add(i)) }.ok_or("null argument")?;
                let arg = arg.to_str().map_err(|_| {
                    format!("argument {i} is not valid UTF-8: {}", arg.to_string_lossy())
                })?;
                args.push(arg);
            }
            P::global_init(&args)
        },
    );
    if let Err(msg) = result {
        log::fatal(&format!("plugin.config: {msg}"));
    }
}

/// # Safety
/// Called by ATS as `TSRemapDoRemap` with a pointer from `new_instance`.
pub unsafe fn do_remap<P: RemapPlugin>(
    ih: *mut c_void,
    txn: sys::TSHttpTxn,
    rri: *mut sys::TSRemapRequestInfo,
) -> sys::TSRemapStatus {
    if let Some(t) = FORWARD.get() {
        // SAFETY: forwarded unchanged from ATS.
        return unsafe { (t.do_remap)(ih, txn, rri) };
    }
    // SAFETY: as above.
    unsafe { do_remap_here::<P>(ih, txn, rri) }
}

/// # Safety
/// ATS's `TSRemapDoRemap` contract.
unsafe extern "C" fn do_remap_here<P: RemapPlugin>(
    ih: *mut c_void,
    txn: sys::TSHttpTxn,
    rri: *mut sys::TSRemapRequestInfo,
) -> sys::TSRemapStatus {
    // SAFETY: ATS passes the live transaction being remapped.
    let (Some(txn), false, false) = (unsafe { Txn::from_raw(txn) }, ih.is_null(), rri.is_null())
    else {
        return sys::TSRemapStatus::TSREMAP_NO_REMAP;
    };
    guard::catch(
        "TSRemapDoRemap",
        || {
            // A status set in remap makes ATS answer with its error page
            // at once (POST_REMAP and the origin are skipped).
            txn.set_status(500);
            sys::TSRemapStatus::TSREMAP_NO_REMAP
        },
        || {
            // SAFETY: ih is the Arc reference ATS holds; borrowing it without
            // taking ownership (ManuallyDrop) keeps ATS's count intact.
            let plugin = ManuallyDrop::new(unsafe { Arc::from_raw(ih as *const P) });
            // SAFETY: rri is valid and exclusively ours for this call.
            let rri = unsafe { &mut *rri };
            let mut req = RemapRequest { rri };
            plugin.do_remap(txn, &mut req).sys()
        },
    )
}
