//! The one guard every FFI entry point and continuation handler runs under.
//!
//! A panic must never unwind into `traffic_server` (that aborts the whole
//! proxy). [`catch`] stops it, reports message and source location through
//! `TSError`, and returns the caller's fail-safe value. What "fail safe"
//! means for a transaction (answer it, or let it continue) is decided by the
//! caller: see [`crate::Hook`], whose `Drop` re-enables an unresolved hook.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Where the last panic on this thread happened, filled in by the hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    /// How many `catch` frames are active on this thread.
    static CATCH_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

static HOOK: Once = Once::new();

/// Replaces the default panic hook (which writes to stderr, i.e. nowhere
/// useful under traffic_manager) by one that records the location for
/// [`catch`] to report. Idempotent. The hook is per .so: each Rust plugin
/// carries its own std.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let loc = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_else(|| "unknown location".to_owned());
            let msg = payload_message(info.payload());
            let bt = std::backtrace::Backtrace::capture();
            let text = match bt.status() {
                std::backtrace::BacktraceStatus::Captured => format!("'{msg}' at {loc}\n{bt}"),
                _ => format!("'{msg}' at {loc}"),
            };
            // Inside `catch` the message is reported with the entry point's
            // name; outside (a plugin-owned thread, a panic during unwinding
            // that aborts) it is logged here or never.
            let caught = CATCH_DEPTH.try_with(|d| d.get() > 0).unwrap_or(false);
            let stored = caught
                && LAST_PANIC
                    .try_with(|slot| {
                        slot.try_borrow_mut()
                            .map(|mut s| *s = Some(text.clone()))
                            .is_ok()
                    })
                    .unwrap_or(false);
            if !stored {
                crate::log::error(&format!("panic outside any entry point: {text}"));
            }
        }));
    });
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Runs `f`; if it panics, logs `panic in <site>: '<msg>' at <file:line>`
/// with `TSError` and returns `fallback()` instead.
///
/// `site` names the entry point (e.g. `"TSRemapDoRemap"`), so the log line
/// says which path failed safe.
pub fn catch<R>(site: &str, fallback: impl FnOnce() -> R, f: impl FnOnce() -> R) -> R {
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            let _ = CATCH_DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    let _ = CATCH_DEPTH.try_with(|d| d.set(d.get() + 1));
    let depth = Depth;
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    drop(depth);
    match result {
        Ok(r) => r,
        Err(payload) => {
            let detail = LAST_PANIC
                .try_with(|slot| slot.borrow_mut().take())
                .ok()
                .flatten()
                .unwrap_or_else(|| format!("'{}'", payload_message(&*payload)));
            crate::log::error(&format!("panic in {site}: {detail}; failing safe"));
            // Dropping the payload could itself panic (a Drop impl inside it);
            // leak it rather than risk unwinding out of the guard.
            std::mem::forget(payload);
            fallback()
        }
    }
}
