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

    /// Appends one line (no trailing newline needed).
    pub fn write(&self, line: &str) {
        let c = to_cstring(line);
        // SAFETY: live log object; fixed "%s" format with one C string.
        unsafe { sys::TSTextLogObjectWrite(self.obj.as_ptr(), c"%s".as_ptr(), c.as_ptr()) };
    }

    /// Asks ATS to write buffered lines out now.
    pub fn flush(&self) {
        // SAFETY: live log object.
        unsafe { sys::TSTextLogObjectFlush(self.obj.as_ptr()) };
    }
}

impl Drop for TextLog {
    fn drop(&mut self) {
        // SAFETY: live log object, destroyed once; no write can be running (&mut self).
        unsafe { sys::TSTextLogObjectDestroy(self.obj.as_ptr()) };
    }
}
