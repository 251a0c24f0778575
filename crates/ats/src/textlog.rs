//! ATS text logs (`TSTextLogObject`): files in the log directory that ATS
//! writes, buffers and rolls like its own logs.

use std::ptr::NonNull;

use crate::{log::to_cstring, sys};

/// A text log such as `throttle.log`.
pub struct TextLog {
    obj: NonNull<sys::tsapi_textlogobject>,
}

// SAFETY: ATS text log objects are written from any thread (LogObject is
// internally synchronised); we never free it while a write can be running
// because writes borrow `self`.
unsafe impl Send for TextLog {}
// SAFETY: see Send.
unsafe impl Sync for TextLog {}

impl TextLog {
    /// Opens (creates) `<logdir>/<name>.log`; with `timestamp`, ATS prefixes
    /// each line with its own timestamp.
    pub fn create(name: &str, timestamp: bool) -> Result<TextLog, String> {
        let cname = to_cstring(name);
        let mode = if timestamp {
            sys::TS_LOG_MODE_ADD_TIMESTAMP.0 as std::ffi::c_int
        } else {
            0
        };
        let mut obj: sys::TSTextLogObject = std::ptr::null_mut();
        // SAFETY: valid C string and out pointer.
        let rc = unsafe { sys::TSTextLogObjectCreate(cname.as_ptr(), mode, &mut obj) };
        match NonNull::new(obj) {
            Some(obj) if rc == sys::TSReturnCode::TS_SUCCESS => Ok(TextLog { obj }),
            _ => Err(format!("cannot create text log {name}.log")),
        }
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
    fn drop(&mut self) {
        // SAFETY: live log object, destroyed once; no write can be running (&mut self).
        unsafe { sys::TSTextLogObjectDestroy(self.obj.as_ptr()) };
    }
}
