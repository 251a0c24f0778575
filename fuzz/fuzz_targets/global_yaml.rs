//! rate_limit.so's global-mode file: upstream's YAML plus `burst` and
//! `per-ip` (crates/sni-limit, `config::parse`). Input: the file's text.
//! Invariants: no panic, no unbounded allocation (aliases, nesting, the
//! size limits); error messages stay short; a parse is deterministic.

#![no_main]
#![forbid(unsafe_code)]

use ats_throttle_fuzz::bounded;
use libfuzzer_sys::fuzz_target;
use sni_limit::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::parse(text, "global.yaml") {
        Ok(c) => {
            let again = config::parse(text, "global.yaml").expect("parses again");
            assert_eq!(format!("{c:?}"), format!("{again:?}"));
        }
        Err(e) => bounded(&e, 4096),
    }
});
