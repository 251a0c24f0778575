//! What this build is: the release it belongs to and the Traffic Server
//! version it was built for, which each plugin logs at load.

use crate::sys;

/// The Traffic Server version the bindings were generated from.
pub const TS_VERSION: &str = match std::ffi::CStr::from_bytes_with_nul(sys::TS_VERSION_STRING) {
    Ok(c) => match c.to_str() {
        Ok(s) => s,
        Err(_) => "unknown",
    },
    Err(_) => "unknown",
};

/// The release the plugins belong to (the workspace's version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The line a plugin logs at load (note level): its release and the Traffic
/// Server it was built for. A build for the other major line never gets this
/// far: the dynamic loader refuses the .so first (docs/packages.md).
pub(crate) fn loaded_line(name: &str) -> String {
    format!("{name}.so {VERSION}, built for Traffic Server {TS_VERSION}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_line_names_the_release_and_the_headers_version() {
        let line = loaded_line("rate_limit");
        assert_eq!(
            line,
            format!(
                "rate_limit.so {}, built for Traffic Server {TS_VERSION}",
                env!("CARGO_PKG_VERSION")
            )
        );
        // The headers' version, MAJOR.MINOR.MICRO, never the fallback.
        let parts: Vec<&str> = TS_VERSION.split('.').collect();
        assert_eq!(parts.len(), 3, "{TS_VERSION}");
        assert!(
            parts.iter().all(|p| p.parse::<u32>().is_ok()),
            "{TS_VERSION}"
        );
    }
}
