//! ip_throttle.so's `@pparam`s and its `--config` file, with the allow and
//! deny list files (crates/ip-throttle-core: `Options::parse`,
//! `lists::parse`). Input: one argument a line; after a NUL, the file
//! `/etc/ats/a` (`--config=a`), after another `/etc/ats/b`. Each file is
//! also parsed as a CIDR list. Invariants: no panic; error messages stay
//! short; a parse is deterministic.

#![no_main]
#![forbid(unsafe_code)]

use std::path::Path;

use ats_throttle_fuzz::{args, bounded, sections};
use ip_throttle_core::{lists, Options};
use libfuzzer_sys::fuzz_target;
use optspec::files::MemFiles;

fuzz_target!(|data: &[u8]| {
    let Some(s) = sections(data) else { return };
    let args = args(s[0], 64);
    let mut files = MemFiles::new().with_dir("/etc/ats/dir");
    for (name, text) in ["a", "b"].iter().zip(&s[1..]) {
        files.insert(&format!("/etc/ats/{name}"), text);
        match lists::parse(text, name) {
            Ok(l) => {
                let again = lists::parse(text, name).expect("parses again");
                assert_eq!(format!("{l:?}"), format!("{again:?}"));
            }
            Err(e) => bounded(&e, 4096),
        }
    }
    let dir = Path::new("/etc/ats");
    match Options::parse(&args, dir, &files) {
        Ok(o) => {
            let again = Options::parse(&args, dir, &files).expect("parses again");
            assert_eq!(o.describe(), again.describe());
        }
        Err(e) => bounded(&e, 4096),
    }
});
