//! rate_limit.so's `@pparam`s (crates/rate-limit-core, `Options::parse`).
//! Input: the rule's from-URL on the first line, then one argument a line.
//! Invariants: no panic; an error message stays short (values are quoted
//! cut); a parse is deterministic and its descriptions render.

#![no_main]
#![forbid(unsafe_code)]

use ats_throttle_fuzz::{any_resolves, args, bounded, sections};
use libfuzzer_sys::fuzz_target;
use rate_limit_core::options::Options;

fuzz_target!(|data: &[u8]| {
    let Some(s) = sections(data) else { return };
    let (url, rest) = s[0].split_once('\n').unwrap_or((s[0], ""));
    let args = args(rest, 64);
    // --peers, --peer-group, --peer-listen resolve names.
    if any_resolves(&args, "--peer") {
        return;
    }
    match Options::parse(url, &args) {
        Ok(o) => {
            let again = Options::parse(url, &args).expect("parsed once, parses again");
            assert_eq!(o, again);
            let _ = o.limiter_options();
            let _ = o.maxage_nanos();
            let _ = o.store_counts_status();
        }
        Err(e) => bounded(&e.0, 4096),
    }
});
