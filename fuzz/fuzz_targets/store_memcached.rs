//! The memcached text-protocol replies (crates/store, `memcached.rs`): to
//! `gets KEYS`, and to pipelined `cas`/`add`/`delete`. Input: the first
//! byte picks the reply kind and, in its bits, the keys asked for or which
//! commands were deletes; the rest is what the server sent. Invariants: no
//! panic; a reply takes no more bytes than there are; values found are at
//! most `MAX_VALUE` bytes and only for keys asked for.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use store::memcached::{replies, MAX_VALUE};

const KEYS: [&str; 4] = [
    "ipt:web:192.0.2.7",
    "ipt:web:2001:db8::1",
    "k",
    "ipt:web:192.0.2.8",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, sent)) = data.split_first() else {
        return;
    };
    if pick & 1 == 0 {
        let keys: Vec<&str> = KEYS
            .iter()
            .enumerate()
            .filter(|(i, _)| pick & (2 << i) != 0)
            .map(|(_, k)| *k)
            .collect();
        if let Ok((found, took)) = replies::gets(sent, &keys) {
            assert!(took <= sent.len());
            assert_eq!(found.len(), keys.len());
            for (v, _cas) in found.iter().flatten() {
                assert!(v.len() <= MAX_VALUE);
            }
        }
    } else {
        let deletes: Vec<bool> = (1..8).map(|b| pick & (1 << b) != 0).collect();
        let n = usize::from(pick >> 5) + 1;
        if let Ok((lost, took)) = replies::writes(sent, &deletes[..n.min(deletes.len())]) {
            assert!(took <= sent.len());
            assert_eq!(lost.len(), n.min(deletes.len()));
        }
    }
});
