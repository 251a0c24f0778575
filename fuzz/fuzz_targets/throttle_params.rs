//! throttle.so's `@pparam`s with `file:` includes (crates/throttle-core,
//! `params::parse`). Input: one parameter a line; after each NUL, a file:
//! `/etc/ats/a`, `/etc/ats/b`, `/etc/ats/c` (`file:a`, or `file:/etc/ats/b`;
//! files may include each other). Invariants: no panic, no endless include
//! loop; error messages stay short; a parse is deterministic.

#![no_main]
#![forbid(unsafe_code)]

use std::path::Path;

use ats_throttle_fuzz::{args, bounded, sections};
use libfuzzer_sys::fuzz_target;
use optspec::files::MemFiles;
use throttle_core::params;

fuzz_target!(|data: &[u8]| {
    let Some(s) = sections(data) else { return };
    let args = args(s[0], 64);
    let mut files = MemFiles::new().with_dir("/etc/ats/dir");
    for (name, text) in ["a", "b", "c"].iter().zip(&s[1..]) {
        files.insert(&format!("/etc/ats/{name}"), text);
    }
    let dir = Path::new("/etc/ats");
    match params::parse(&args, dir, &files) {
        Ok(p) => assert_eq!(Ok(p), params::parse(&args, dir, &files)),
        Err(e) => bounded(&e, 4096),
    }
});
