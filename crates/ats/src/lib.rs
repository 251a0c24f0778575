//! Safe layer over the Traffic Server plugin C API.
//!
//! This is the only crate of the workspace with `unsafe` code over TS
//! pointers. Plugin crates build on it; pure logic crates never depend on it
//! (a test binary that references a `TS*` symbol cannot link outside
//! `traffic_server`).
//!
//! - [`remap_plugin!`] + [`remap::RemapPlugin`]: the four remap entry points,
//!   each run under [`guard::catch`].
//! - [`Txn`], [`Hook`], [`Parked`]: hooks must be resolved exactly once; an
//!   unresolved hook fails safe (answer 500 / continue) once the guard has
//!   stopped any unwind. A parked transaction is read and changed only on
//!   its own thread ([`Parked::on_home`] → [`HomeTxn`]).
//! - [`HookCont`]/[`HookHandler`]: hook continuations with one generic trampoline.
//! - [`CloseHook`]/[`CloseHandler`]: a TXN_CLOSE hook shared by the
//!   transactions it was added to, freed after the last (a rule's slot
//!   release, with no per-transaction state).
//! - [`TxnData`]/[`SsnData`]/[`VConnData`]: per-transaction/session/connection
//!   state dropped at close.
//! - [`vconn`]: TLS connections at the client hello (global hooks): resolve,
//!   refuse or park a handshake ([`ClientHello`], [`ParkedHello`], [`HomeHello`]).
//! - [`mgmt`]: records, and a plugin file reread on `traffic_ctl config reload`.
//! - [`sched`]: one-shot (cancellable) and periodic work on ATS threads.
//! - [`msg`]: `traffic_ctl plugin msg` commands ([`msg::serve`]: parsed on
//!   the management thread, run on a task thread, JSON answers in a text log;
//!   [`msg::Roster`]: the rules they can name, listed weakly per remap load).
//! - [`wake`]: a plugin's own thread wakes an ATS net thread promptly by
//!   writing to a socket pair that ATS polls (no TS call off ATS threads).
//! - [`stats`], [`textlog`], [`log`]: metrics, text logs, diagnostics
//!   (always through a fixed `"%s"` format).

pub use ats_sys as sys;

use std::os::unix::ffi::OsStrExt;

mod close_hook;
mod cont;
mod event_thread;
mod global_arg;
pub mod guard;
mod hdr;
mod inbox;
pub mod log;
pub mod mgmt;
pub mod msg;
mod net;
mod origin;
pub mod poller;
mod release;
pub mod remap;
pub mod sched;
pub mod stats;
pub mod textlog;
mod txn;
mod user_arg;
pub mod vconn;
pub mod wake;

pub use close_hook::{CloseHandler, CloseHook};
pub use cont::{HookCont, HookHandler};
pub use event_thread::EventThread;
pub use hdr::Header;
pub use origin::OriginReply;
pub use remap::{ReloadStatus, RemapArgs, RemapPlugin, RemapRequest, RemapStatus};
pub use txn::{error_page, CacheLookup, Done, HomeTxn, Hook, HookId, Parked, Ssn, SsnHook, Txn};
pub use user_arg::{SsnData, TxnData, VConnData};
pub use vconn::{
    hook_client_hello, ClientHello, ClientHelloHandler, HomeHello, ParkedHello, VConn,
};

pub use release::{TS_VERSION, VERSION};

/// ATS's configuration directory (`TSConfigDirGet`), where relative plugin
/// configuration file names are resolved.
pub fn config_dir() -> std::path::PathBuf {
    // SAFETY: no preconditions; ATS returns a NUL-terminated string it owns
    // for the life of the process, or null.
    let p = unsafe { sys::TSConfigDirGet() };
    if p.is_null() {
        return std::path::PathBuf::new();
    }
    // SAFETY: non-null, NUL-terminated and never freed (see above).
    let c = unsafe { std::ffi::CStr::from_ptr(p) };
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(c.to_bytes()))
}
