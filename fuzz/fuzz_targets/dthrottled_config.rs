//! dthrottled's configuration file (daemons/dthrottled, `config::parse`).
//! Input: the file's text. Invariants: no panic; an error message names a
//! line and stays bounded; a valid file has something to listen on.
//! Inputs naming a host to resolve (`listen_tcp = name:7411`) are skipped:
//! a lookup is slow and depends on the network.

#![no_main]
#![forbid(unsafe_code)]

use ats_throttle_fuzz::{bounded, resolves};
use dthrottled::config;
use libfuzzer_sys::fuzz_target;

/// The settings whose values are resolved (`HOST:PORT`, or lists of them).
const ADDRESSES: [&str; 4] = ["listen_tcp", "peers", "peer_group", "peer_listen"];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let looks_up = text.lines().any(|raw| {
        let l = raw.split('#').next().unwrap_or("").trim();
        l.split_once('=')
            .is_some_and(|(n, v)| ADDRESSES.contains(&n.trim()) && resolves(v.trim()))
    });
    if looks_up {
        return;
    }
    match config::parse(text) {
        Ok(c) => {
            assert!(!c.listen_tcp.is_empty() || c.listen_unix.is_some());
            assert!(!c.peering() || c.peer_secret_file.is_some());
            assert!(c.max_line > 0 && c.max_connections > 0 && c.max_tags > 0);
        }
        // The value is quoted whole (a line of an operator's file), so the
        // bound is the longest line's, plus the message.
        Err(e) => bounded(&e, 1024 + text.lines().map(str::len).max().unwrap_or(0) * 5),
    }
});
