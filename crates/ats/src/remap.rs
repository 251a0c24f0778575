//! Remap plugins: a trait, and the generic `extern "C"` entry points that
//! [`crate::remap_plugin!`] exports for it.
//!
//! Instances are `Arc`s: ATS holds one reference between
//! `TSRemapNewInstance` and `TSRemapDeleteInstance`, and a transaction that
//! needs its rule after that (a queued request, a held slot) clones another,
//! so state outlives a config reload exactly as long as it is used.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use crate::hdr::Header;
use crate::txn::Txn;
use crate::{log, sys};

/// What `TSRemapDoRemap` tells ATS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemapStatus {
    /// The URL was not changed; continue with the next plugin in the chain.
    NoRemap,
    /// The URL was changed; continue with the next plugin.
    DidRemap,
    /// Not changed; stop the plugin chain.
    NoRemapStop,
    /// Changed; stop the plugin chain.
    DidRemapStop,
}

impl RemapStatus {
    fn sys(self) -> sys::TSRemapStatus {
        match self {
            RemapStatus::NoRemap => sys::TSRemapStatus::TSREMAP_NO_REMAP,
            RemapStatus::DidRemap => sys::TSRemapStatus::TSREMAP_DID_REMAP,
            RemapStatus::NoRemapStop => sys::TSRemapStatus::TSREMAP_NO_REMAP_STOP,
            RemapStatus::DidRemapStop => sys::TSRemapStatus::TSREMAP_DID_REMAP_STOP,
        }
    }
}

/// The arguments of one remap rule's `@plugin=` entry.
pub struct RemapArgs<'a> {
    /// The rule's "from" URL (canonicalised by ATS).
    pub from_url: &'a str,
    /// The rule's "to" URL.
    pub to_url: &'a str,
    options: Vec<&'a str>,
}

impl<'a> RemapArgs<'a> {
    /// The `@pparam` values, in order (argv[2..]).
    pub fn options(&self) -> &[&'a str] {
        &self.options
    }
}

/// The per-request remap data (`TSRemapRequestInfo`).
pub struct RemapRequest<'a> {
    rri: &'a mut sys::TSRemapRequestInfo,
}

impl<'a> RemapRequest<'a> {
    /// The client request header (the same object as `TSHttpTxnClientReqGet`).
    pub fn request_header(&self) -> Option<Header<'_>> {
        // SAFETY: ATS owns (requestBufp, requestHdrp) for the remap call; not released by us.
        unsafe { Header::borrowed(self.rri.requestBufp, self.rri.requestHdrp) }
    }
}

/// A remap plugin: one value per remap rule that names it.
pub trait RemapPlugin: Sized + Send + Sync + 'static {
    /// Name used as debug tag and log prefix (e.g. `"rate_limit"`).
    const NAME: &'static str;

    /// Called once when ATS loads the .so (continuations, user arguments).
    fn init() -> Result<(), String> {
        Ok(())
    }

    /// Builds the instance for one rule. An `Err` fails the rule: ATS logs the
    /// message in diags.log and refuses the configuration.
    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String>;

    /// The rule as ATS now holds it (after `new_instance` succeeded), e.g.
    /// to list it weakly for management commands.
    fn created(_rule: &Arc<Self>) {}

    /// Handles one request on the rule.
    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, req: &mut RemapRequest<'_>) -> RemapStatus;

    /// remap.config is about to be read again (`TSRemapPreConfigReload`);
    /// `new_instance` calls for the new configuration follow.
    fn pre_reload() {}

    /// remap.config was read (`TSRemapPostConfigReload`), also at startup:
    /// `Loaded` means the new rules now serve; `Failed` means they were
    /// refused and the old ones keep serving.
    fn post_reload(_status: ReloadStatus) {}

    /// The .so is also listed in plugin.config, with `args` after its name
    /// (called once, after it is pinned: see `entry::plugin_init`). An
    /// `Err` stops traffic_server with the message, as a bad remap.config
    /// does: a global plugin that cannot start must not leave the proxy
    /// running unprotected.
    fn global_init(_args: &[&str]) -> Result<(), String> {
        Ok(())
    }

    /// The last rule naming this copy of the .so was deleted
    /// (`TSRemapDone`; ATS may unload the copy next): stop what the rules
    /// left running process-wide. Transactions still in flight may hold
    /// their rule a little longer.
    fn done() {}
}

/// How a read of remap.config ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadStatus {
    /// The new rules serve; `used`: some of them name this plugin.
    Loaded { used: bool },
    /// The new configuration was refused; the old one keeps serving.
    Failed,
}

/// Copies `msg` into ATS's error buffer, truncated at a char boundary and
/// NUL-terminated. ATS logs the buffer as a C string on one diags line, so
/// control characters are escaped: a NUL would end the message there.
fn write_errbuf(errbuf: *mut c_char, size: c_int, msg: &str) {
    let Ok(size) = usize::try_from(size) else {
        return;
    };
    if errbuf.is_null() || size == 0 {
        return;
    }
    let msg = log::escape(msg, char::is_control);
    let mut n = msg.len().min(size - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: errbuf has `size` writable bytes (remap.h contract); n < size.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), errbuf.cast::<u8>(), n);
        *errbuf.add(n) = 0;
    }
}

mod copies;

/// Implementation of the exported entry points; use [`crate::remap_plugin!`].
#[doc(hidden)]
pub mod entry;

/// Exports the remap entry points (`TSRemapInit`, `TSRemapNewInstance`,
/// `TSRemapDeleteInstance`, `TSRemapDoRemap`, the reload notifications and
/// `TSRemapDone`) for a [`RemapPlugin`] type.
#[macro_export]
macro_rules! remap_plugin {
    ($plugin:ty) => {
        /// ATS entry point; see `ts/remap.h`.
        ///
        /// # Safety
        /// Only ATS calls this.
        #[no_mangle]
        pub unsafe extern "C" fn TSRemapInit(
            api: *mut $crate::sys::TSRemapInterface,
            errbuf: *mut ::std::ffi::c_char,
            errbuf_size: ::std::ffi::c_int,
        ) -> $crate::sys::TSReturnCode {
            // SAFETY: forwarded unchanged from ATS.
            unsafe { $crate::remap::entry::init::<$plugin>(api, errbuf, errbuf_size) }
        }

        /// ATS entry point; see `ts/remap.h`.
        ///
        /// # Safety
        /// Only ATS calls this.
        #[no_mangle]
        pub unsafe extern "C" fn TSRemapNewInstance(
            argc: ::std::ffi::c_int,
            argv: *mut *mut ::std::ffi::c_char,
            ih: *mut *mut ::std::ffi::c_void,
            errbuf: *mut ::std::ffi::c_char,
            errbuf_size: ::std::ffi::c_int,
        ) -> $crate::sys::TSReturnCode {
            // SAFETY: forwarded unchanged from ATS.
            unsafe {
                $crate::remap::entry::new_instance::<$plugin>(argc, argv, ih, errbuf, errbuf_size)
            }
        }

        /// ATS entry point; see `ts/remap.h`.
        ///
        /// # Safety
        /// Only ATS calls this.
        #[no_mangle]
        pub unsafe extern "C" fn TSRemapDeleteInstance(ih: *mut ::std::ffi::c_void) {
            // SAFETY: forwarded unchanged from ATS.
            unsafe { $crate::remap::entry::delete_instance::<$plugin>(ih) }
        }

        /// ATS entry point; see `ts/remap.h`.
        ///
        /// # Safety
        /// Only ATS calls this.
        #[no_mangle]
        pub unsafe extern "C" fn TSRemapDoRemap(
            ih: *mut ::std::ffi::c_void,
            txn: $crate::sys::TSHttpTxn,
            rri: *mut $crate::sys::TSRemapRequestInfo,
        ) -> $crate::sys::TSRemapStatus {
            // SAFETY: forwarded unchanged from ATS.
            unsafe { $crate::remap::entry::do_remap::<$plugin>(ih, txn, rri) }
        }

        /// ATS entry point; see `ts/remap.h`.
        #[no_mangle]
        pub extern "C" fn TSRemapPreConfigReload() {
            $crate::remap::entry::pre_reload::<$plugin>()
        }

        /// ATS entry point; see `ts/remap.h`.
        #[no_mangle]
        pub extern "C" fn TSRemapPostConfigReload(status: $crate::sys::TSRemapReloadStatus) {
            $crate::remap::entry::post_reload::<$plugin>(status)
        }

        /// ATS entry point; see `ts/remap.h`.
        #[no_mangle]
        pub extern "C" fn TSRemapDone() {
            $crate::remap::entry::done::<$plugin>()
        }

        /// ATS entry point for a plugin.config line; see
        /// [`$crate::remap::entry::plugin_init`].
        ///
        /// # Safety
        /// Only ATS calls this.
        #[no_mangle]
        pub unsafe extern "C" fn TSPluginInit(
            argc: ::std::ffi::c_int,
            argv: *mut *const ::std::ffi::c_char,
        ) {
            // SAFETY: forwarded unchanged from ATS.
            unsafe { $crate::remap::entry::plugin_init::<$plugin>(argc, argv) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::write_errbuf;

    fn written(msg: &str, size: usize) -> Vec<u8> {
        let mut buf = vec![b'#'; size];
        let len = std::ffi::c_int::try_from(size).unwrap_or(0);
        write_errbuf(buf.as_mut_ptr().cast(), len, msg);
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        buf
    }

    #[test]
    fn a_nul_is_escaped_and_the_message_goes_on() {
        assert_eq!(
            written(
                "invalid value '1\0' at /etc/x.config:2: not a whole number",
                1024
            ),
            b"invalid value '1\\0' at /etc/x.config:2: not a whole number"
        );
        assert_eq!(written("a\nb\u{1b}c", 1024), b"a\\nb\\u{1b}c");
    }

    #[test]
    fn truncates_at_a_char_boundary() {
        assert_eq!(written("abcé", 5), b"abc");
        assert_eq!(written("abcé", 6), "abcé".as_bytes());
        assert_eq!(written("\0\0\0", 4), b"\\0\\");
    }
}
