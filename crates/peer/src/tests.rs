//! The wire format's, receiver's and transport's tests, by subject (tests/),
//! and the keys, policies and datagrams they share.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::transport::{Config, Outgoing, Transport};
use crate::wire::{self, Entry, Kind, Reject, MAX_DATAGRAM, MIN_DATAGRAM};
use crate::{Key, Policy, Receiver};

const NOW: u64 = 1_800_000_000_000;
const LOCAL: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9);

fn key() -> Key {
    Key::new(b"0123456789abcdef-test-secret").unwrap_or_else(|e| panic!("{e}"))
}

fn policy() -> Policy {
    Policy {
        allowed: vec![ipnet::IpNet::from(IpAddr::V4(Ipv4Addr::LOCALHOST))],
        window_ms: 10_000,
        max_senders: 4,
    }
}

fn entries(n: usize, len: usize) -> Vec<Entry> {
    (0..n)
        .map(|i| {
            let mut tag = format!("tag-{i}-").into_bytes();
            tag.resize(len.max(tag.len()), b'x');
            (tag.into_boxed_slice(), i as u32 + 1)
        })
        .collect()
}

fn one(sender: u64, seq: u64, sent: u64) -> Vec<u8> {
    let mut s = seq;
    wire::encode(&key(), sender, &mut s, sent, b"g", &entries(1, 4)).remove(0)
}

mod datagrams;
mod loopback;
mod prop;
