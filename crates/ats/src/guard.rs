//! The one guard every FFI entry point and continuation handler runs under.
//!
//! A panic must never unwind into `traffic_server` (that aborts the whole
//! proxy). [`catch`] stops it, reports message and source location through
//! `TSError`, and returns the caller's fail-safe value. What "fail safe"
//! means for a transaction (answer it, or let it continue) is decided by the
//! caller once `catch_unwind` has returned (pgrx's GuardAction pattern):
//! ATS's state machine must never run inside a destructor while a panic
//! unwinds. Destructors that must fail a transaction safe (an unresolved
//! [`crate::Parked`]) hand the action to [`defer`], and `catch` runs it
//! after the unwind is over.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Where the last panic on this thread happened, filled in by the hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    /// What `catch` reads on every entry and exit. No destructor: each
    /// access is one `__tls_get_addr` in a dlopen'ed cdylib and nothing more
    /// (a thread-local with one also checks its lazy state), and it is
    /// usable even while the thread exits.
    static COUNTS: Counts = const {
        Counts {
            depth: Cell::new(0),
            deferred: Cell::new(0),
        }
    };
    /// Fail-safe actions deferred by destructors that ran while unwinding
    /// (touched only when there are some).
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

struct Counts {
    /// How many `catch` frames are active on this thread.
    depth: Cell<u32>,
    /// `DEFERRED`'s length.
    deferred: Cell<usize>,
}

fn inside_catch() -> bool {
    COUNTS.with(|c| c.depth.get() > 0)
}

/// Runs `action` now, or, if this thread is unwinding from a panic inside a
/// [`catch`], right after that `catch` has stopped the unwind. For
/// destructors that must re-enable a transaction: doing it during the
/// unwind would run ATS's state machine (and any plugin code it calls back)
/// inside a half-unwound stack.
pub fn defer(action: impl FnOnce() + 'static) {
    if !(std::thread::panicking() && inside_catch()) {
        action();
        return;
    }
    let mut action = Some(Box::new(action) as Box<dyn FnOnce()>);
    let _ = DEFERRED.try_with(|d| {
        if let Ok(mut d) = d.try_borrow_mut() {
            d.extend(action.take());
            COUNTS.with(|c| c.deferred.set(d.len()));
        }
    });
    // The list is gone (thread exiting) or busy: better now than never.
    if let Some(a) = action {
        a();
    }
}

/// Runs the actions deferred since the list had `from` entries, each under
/// its own `catch_unwind` (one failing must not skip the others).
fn run_deferred(site: &str, from: usize) {
    loop {
        let next = DEFERRED
            .try_with(|d| {
                let mut d = d.try_borrow_mut().ok()?;
                let next = (d.len() > from).then(|| d.remove(from));
                COUNTS.with(|c| c.deferred.set(d.len()));
                next
            })
            .ok()
            .flatten();
        let Some(action) = next else { return };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(action)) {
            crate::log::error(&format!(
                "panic in {site} (deferred fail-safe): '{}'",
                payload_message(&*payload)
            ));
            std::mem::forget(payload);
        }
    }
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
            let stored = inside_catch()
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
/// with `TSError` and returns `fallback()` instead. Fail-safe actions that
/// destructors [`defer`]red during the unwind run before `fallback`.
///
/// `site` names the entry point (e.g. `"TSRemapDoRemap"`), so the log line
/// says which path failed safe.
pub fn catch<R>(site: &str, fallback: impl FnOnce() -> R, f: impl FnOnce() -> R) -> R {
    // Only what this frame's unwind deferred is ours to run: an outer frame
    // may itself be unwinding (a `catch` inside a destructor).
    let deferred_from = COUNTS.with(|c| {
        c.depth.set(c.depth.get() + 1);
        c.deferred.get()
    });
    // `catch_unwind` stops every panic, so the depth is restored below on
    // both paths.
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    let deferred = COUNTS.with(|c| {
        c.depth.set(c.depth.get().saturating_sub(1));
        c.deferred.get() > deferred_from
    });
    // Deferred actions run once no unwind is in progress: here, unless this
    // `catch` sits in a destructor of an outer unwind, whose own `catch`
    // runs them (also those deferred under a nested `catch_unwind` that
    // swallowed its panic).
    let run_now = deferred && !std::thread::panicking();
    match result {
        Ok(r) => {
            if run_now {
                run_deferred(site, deferred_from);
            }
            r
        }
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
            if run_now {
                run_deferred(site, deferred_from);
            }
            fallback()
        }
    }
}
