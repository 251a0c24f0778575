//! The RESP2 reply reader of the Redis backends (crates/store, `resp.rs`):
//! what a Redis server, or whatever answers on its port, sends back.
//! Input: the bytes read from the connection. Invariants: no panic; a
//! reply takes no more bytes than there are, and at most `MAX_REPLY`
//! (so memory stays bounded whatever lengths the server claims).

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use store::read_reply;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // Replies back to back, as a pipeline's answers arrive.
    for _ in 0..16 {
        let Ok((_value, took)) = read_reply(rest) else {
            return;
        };
        assert!(took > 0 && took <= rest.len());
        rest = &rest[took..];
    }
});
