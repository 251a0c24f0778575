//! Diagnostics: error, warning, note and debug lines in diags.log, and a
//! [`log`] crate backend so plugin and logic code can use `log::warn!` and
//! friends.
//!
//! Every line goes through the shim (`ats-sys/shim/ts_shim.h`) as one
//! finished string: 9.x writes it with `TSError("%s", …)` and `TSDebug`,
//! 10.x the same or through a C++ `DbgCtl` (10.x has no `TSDebug`). Text is
//! never passed as a C format string: a `%n` in a URL or an option must not
//! become a write primitive inside `traffic_server`.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt::Write;
use std::sync::OnceLock;

use crate::sys;

/// `text` with the characters `which` selects written as escapes (`\0`,
/// `\n`, `\u{1b}`), so they can neither end a C string nor break a line.
pub(crate) fn escape(text: &str, which: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&which) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if which(c) {
            // Writing to a String cannot fail.
            let _ = write!(out, "{}", c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Builds a C string from arbitrary text; interior NULs become `\0` escapes
/// rather than truncating (or failing) the message. Other control
/// characters stay: a panic's backtrace is logged on several lines.
pub(crate) fn to_cstring(text: &str) -> CString {
    // No NULs are left after the escaping.
    CString::new(escape(text, |c| c == '\0').into_owned()).unwrap_or_default()
}

/// The plugin's name, used as the `[name]` prefix of every message, and the
/// debug control of its debug tag (same name). Set once by the remap entry points.
static PLUGIN: OnceLock<(&'static str, DbgCtl)> = OnceLock::new();

/// The shim's debug control for one debug tag, made once and never freed.
struct DbgCtl(*const c_void);

// SAFETY: the control is immutable after creation (9.x: a C string; 10.x: a
// DbgCtl whose state ATS updates atomically) and is read from any thread.
unsafe impl Send for DbgCtl {}
// SAFETY: as above.
unsafe impl Sync for DbgCtl {}

pub(crate) fn set_plugin_name(name: &'static str) {
    if PLUGIN.get().is_some() {
        return;
    }
    // Leaked on purpose: the control must outlive every debug call, and a
    // plugin sets its name once per process.
    let debug_tag: &'static CStr = Box::leak(to_cstring(name).into_boxed_c_str());
    // SAFETY: `debug_tag` is NUL-terminated and lives for the process, as the
    // shim requires (it may keep the pointer).
    let ctl = DbgCtl(unsafe { sys::tsrs_dbg_ctl(debug_tag.as_ptr()) });
    let _ = PLUGIN.set((name, ctl));
}

/// The plugin's name as given to [`crate::remap_plugin!`], or `"plugin"` before init.
pub fn plugin_name() -> &'static str {
    PLUGIN.get().map(|p| p.0).unwrap_or("plugin")
}

fn prefixed(msg: &str) -> CString {
    to_cstring(&format!("[{}] {msg}", plugin_name()))
}

/// Logs to diags.log (and error.log) at ERROR level.
pub fn error(msg: &str) {
    let c = prefixed(msg);
    // SAFETY: a NUL-terminated string, written with a fixed "%s" format.
    unsafe { sys::tsrs_error(c.as_ptr()) }
}

/// Logs at FATAL level and stops traffic_server: for a plugin.config
/// plugin whose configuration cannot start (as a bad remap.config stops it).
pub fn fatal(msg: &str) {
    let c = prefixed(msg);
    // SAFETY: a NUL-terminated string, written with a fixed "%s" format.
    unsafe { sys::tsrs_fatal(c.as_ptr()) }
}

/// Logs to diags.log at WARNING level.
pub fn warning(msg: &str) {
    let c = prefixed(msg);
    // SAFETY: a NUL-terminated string, written with a fixed "%s" format.
    unsafe { sys::tsrs_warning(c.as_ptr()) }
}

/// Logs to diags.log at NOTE level.
pub fn note(msg: &str) {
    let c = prefixed(msg);
    // SAFETY: a NUL-terminated string, written with a fixed "%s" format.
    unsafe { sys::tsrs_note(c.as_ptr()) }
}

/// True if debug output for the plugin's debug tag is enabled
/// (`proxy.config.diags.debug.tags`). Cheap: check it before formatting.
pub fn debug_enabled() -> bool {
    match PLUGIN.get() {
        // SAFETY: a control made by tsrs_dbg_ctl, never freed.
        Some((_, ctl)) => unsafe { sys::tsrs_dbg_on(ctl.0) != 0 },
        None => false,
    }
}

/// Writes a debug line under the plugin's debug tag if it is enabled.
pub fn debug(msg: &str) {
    let Some((_, ctl)) = PLUGIN.get() else { return };
    // 10.x's print does not check the debug tag itself (its Dbg macro does).
    // SAFETY: a control made by tsrs_dbg_ctl, never freed.
    if unsafe { sys::tsrs_dbg_on(ctl.0) } == 0 {
        return;
    }
    let c = to_cstring(msg);
    // SAFETY: live control; a NUL-terminated string, written with "%s".
    unsafe { sys::tsrs_dbg_print(ctl.0, c.as_ptr()) }
}

/// `log` backend: error, warn and info → diags.log's ERROR, WARNING and
/// NOTE; debug/trace → debug output under the plugin's debug tag.
struct AtsLogger;

impl log::Log for AtsLogger {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        meta.level() <= log::Level::Info || debug_enabled()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        match record.level() {
            log::Level::Error => error(&msg),
            log::Level::Warn => warning(&msg),
            log::Level::Info => note(&msg),
            log::Level::Debug | log::Level::Trace => debug(&msg),
        }
    }

    fn flush(&self) {}
}

static LOGGER: AtsLogger = AtsLogger;

/// Installs the `log` backend. Each plugin .so has its own copy of the
/// `log` crate, so this does not clash with other Rust plugins.
pub(crate) fn install_logger() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

/// Borrowed view of a C string array element (argv from remap.config).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn argv_str<'a>(p: *const c_char) -> Option<&'a CStr> {
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated per the caller's contract; argv
        // strings (unlike TS header strings) are C strings.
        Some(unsafe { CStr::from_ptr(p) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nuls_are_escaped_and_the_text_goes_on() {
        assert_eq!(to_cstring("stale:1\0 at x").to_bytes(), b"stale:1\\0 at x");
        assert_eq!(to_cstring("a\nb").to_bytes(), b"a\nb");
    }

    #[test]
    fn escape_writes_only_the_selected_characters_as_escapes() {
        assert!(matches!(
            escape("plain", char::is_control),
            Cow::Borrowed("plain")
        ));
        assert_eq!(
            escape("a\0b\nc\u{1b}é", char::is_control),
            "a\\0b\\nc\\u{1b}é"
        );
    }
}
