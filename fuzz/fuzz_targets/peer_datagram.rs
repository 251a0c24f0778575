//! DThrottle's peer datagrams (crates/peer): the codec, its HMAC and the
//! receiver's checks, with a fixed key. The first byte picks what the rest
//! is:
//! - 0: a datagram as received: `wire::open` (almost always a bad MAC);
//! - 1: a datagram's body, signed here with the key, then opened: the
//!   parser behind the MAC. What opens (hits or blocks) re-encodes, as its
//!   kind, to a datagram that opens to the same;
//! - 2: a sequence of datagrams to one `Receiver`, each `[flags][len][body]`
//!   (flags: bit 0 signs it, bits 1-2 pick the source, bits 3-7 move the
//!   clock on). No sender and sequence number is accepted twice, nor a
//!   stale or own datagram, nor more senders than the policy holds.

#![no_main]
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use peer::wire::{self, Reject, MAX_DATAGRAM};
use peer::{Key, Policy, Receiver};

const SECRET: &[u8] = b"fuzzing-secret-0123456789";
const OWN_ID: u64 = 7;
const WINDOW_MS: u64 = 10_000;
const MAX_SENDERS: usize = 4;

fn signed(key: &Key, body: &[u8]) -> Vec<u8> {
    let mut d = body.to_vec();
    d.extend_from_slice(&key.sign(body));
    d
}

fn sequence(key: &Key, mut data: &[u8]) {
    let mut r = Receiver::new(
        key.clone(),
        OWN_ID,
        Policy {
            allowed: vec![
                "10.0.0.0/8".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ],
            window_ms: WINDOW_MS,
            max_senders: MAX_SENDERS,
        },
    );
    let sources: [SocketAddr; 4] = [
        "10.0.0.1:7412".parse().unwrap(),
        "[::ffff:10.0.0.2]:7412".parse().unwrap(),
        "[2001:db8::3]:7412".parse().unwrap(),
        "192.0.2.9:7412".parse().unwrap(),
    ];
    let mut now: u64 = 1_000_000;
    let mut seen = HashSet::new();
    while let [flags, hi, lo, rest @ ..] = data {
        let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(rest.len());
        let (body, tail) = rest.split_at(len);
        data = tail;
        // The clock never goes back here (the receiver's wall clock).
        now += u64::from(flags >> 3) * 1_000;
        let dg = if flags & 1 == 1 {
            signed(key, body)
        } else {
            body.to_vec()
        };
        let src = sources[usize::from((flags >> 1) & 3)];
        match r.accept(src, &dg, now) {
            Ok(d) => {
                assert_ne!(d.sender, OWN_ID);
                assert!(d.sent_ms.abs_diff(now) <= WINDOW_MS);
                assert!(seen.insert((d.sender, d.seq)), "accepted twice: {d:?}");
                assert_ne!(src, sources[3], "from a source not allowed");
            }
            Err(Reject::BadMac) => assert_eq!(flags & 1, 0, "signed, yet a bad MAC"),
            Err(_) => {}
        }
        assert!(r.senders() <= MAX_SENDERS);
    }
}

fuzz_target!(|data: &[u8]| {
    let key = Key::new(SECRET).expect("a long enough secret");
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            let pre = wire::precheck(rest);
            let opened = wire::open(&key, rest);
            if let Err(e) = pre {
                assert_eq!(opened, Err(e));
            }
        }
        1 => {
            let d = signed(&key, rest);
            let Ok(dg) = wire::open(&key, &d) else { return };
            assert!(d.len() <= MAX_DATAGRAM);
            let mut seq = dg.seq;
            let out = wire::encode_kind(
                &key,
                dg.sender,
                &mut seq,
                dg.sent_ms,
                &dg.group,
                dg.kind,
                &dg.entries,
            );
            if dg.entries.is_empty() {
                assert!(out.is_empty());
                return;
            }
            assert_eq!(out.len(), 1, "one datagram's entries fit one datagram");
            assert_eq!(seq, dg.seq.wrapping_add(1));
            let again = wire::open(&key, &out[0]).expect("encoded, opens");
            assert_eq!(again, dg);
            // Same length, unless the peer's varints were longer than needed.
            assert!(out[0].len() <= d.len());
            assert_eq!(out[0].len() == d.len(), out[0] == d);
        }
        _ => sequence(&key, rest),
    }
});
