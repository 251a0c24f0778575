//! How a refused file is worded: the `--config` file (`options`) and the
//! list files (`lists`) alike. A leaf, so both use it without the crate root.

use optspec::files::ReadError;

/// The reason a `--config` or list file was refused, as ip_throttle has
/// always worded it: the OS's message (a directory too, as a read of one
/// fails), "larger than N bytes", "not UTF-8 text (byte N)".
pub(crate) fn unreadable(e: ReadError) -> String {
    match e {
        ReadError::Directory => e.std_wording(),
        e => e.to_string(),
    }
}
