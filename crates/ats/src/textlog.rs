//! ATS text logs (`TSTextLogObject`): files in the log directory that ATS
//! writes, buffers and rolls like its own logs. Handles on one name share
//! one object, across the copies of our plugins too (`shared`).

mod shared;

use std::ptr::NonNull;

use crate::{log::to_cstring, sys};

/// A text log such as `throttle.log`.
pub struct TextLog {
    obj: NonNull<sys::tsapi_textlogobject>,
}

// SAFETY: ATS text log objects are written from any thread (LogObject is
// internally synchronised); the object is freed only with its last handle,
// and a write borrows its handle.
unsafe impl Send for TextLog {}
// SAFETY: see Send.
unsafe impl Sync for TextLog {}

/// Finds or sets up the process's registry of log objects. Called where ATS
/// loads a plugin: global user arguments are looked up and reserved there,
/// on the one loading thread, so two copies cannot both create one.
pub(crate) fn prepare() {
    shared::prepare();
}

impl TextLog {
    /// Opens (creates) `<logdir>/<name>.log`; with `timestamp`, ATS prefixes
    /// each line with its own timestamp. A name open already (by this
    /// plugin, another of ours, or another copy of one) shares its object:
    /// the file is the same, and closes with the last handle.
    pub fn create(name: &str, timestamp: bool) -> Result<TextLog, String> {
        let mode = if timestamp {
            sys::TS_LOG_MODE_ADD_TIMESTAMP.0 as std::ffi::c_int
        } else {
            0
        };
        shared::acquire(name, mode).map(|obj| TextLog { obj })
    }

    /// Appends one line (no trailing newline needed). ATS skips a line that
    /// does not fit its log buffer ([`max_line`]) whole, or any line when
    /// its log space is exhausted, and says so only by this error.
    pub fn write(&self, line: &str) -> Result<(), String> {
        let c = to_cstring(line);
        // SAFETY: live log object; the shim writes the C string with "%s".
        let rc = unsafe { sys::tsrs_text_log_write(self.obj.as_ptr(), c.as_ptr()) };
        if rc == sys::TSReturnCode::TS_SUCCESS {
            Ok(())
        } else {
            Err(format!(
                "ATS refused a {} byte line (line longer than proxy.config.log.log_buffer_size {}, or log space exhausted)",
                line.len(),
                buffer_size().map_or_else(|| "unknown".to_owned(), |n| n.to_string())
            ))
        }
    }

    /// Asks ATS to write buffered lines out now.
    pub fn flush(&self) {
        // SAFETY: live log object.
        unsafe { sys::TSTextLogObjectFlush(self.obj.as_ptr()) };
    }
}

/// `proxy.config.log.log_buffer_size`: a text log line longer than this
/// (less ATS's headers) is dropped.
pub fn buffer_size() -> Option<usize> {
    let mut v: sys::TSMgmtInt = 0;
    // SAFETY: valid C string and out pointer.
    let rc = unsafe { sys::TSMgmtIntGet(c"proxy.config.log.log_buffer_size".as_ptr(), &mut v) };
    (rc == sys::TSReturnCode::TS_SUCCESS)
        .then(|| usize::try_from(v).ok())
        .flatten()
}

/// The longest line to write: 8000 bytes, less if the log buffer is smaller
/// (room is left for ATS's entry headers), never under 1000.
pub fn max_line() -> usize {
    const MOST: usize = 8000;
    buffer_size().map_or(MOST, |b| b.saturating_sub(1024).clamp(1000, MOST))
}

impl Drop for TextLog {
    /// No write can be running through this handle (`&mut self`); others
    /// keep the object until the last is dropped.
    fn drop(&mut self) {
        shared::release(self.obj);
    }
}
