//! Accepting datagrams: sender allow-list, MAC, freshness and replay window.
//!
//! # Replays and restarts
//! Every process picks a random 64-bit sender id when it starts and numbers
//! its datagrams from 0. A receiver keeps, per sender id, the highest
//! sequence number seen and a 64-datagram window below it: a number seen
//! before, or older than the window, is a replay. A restarted sender has a
//! new id, so it is never mistaken for a replayer. Datagrams also carry the
//! sender's wall-clock time and are refused when it differs from the
//! receiver's by more than the replay window W: that bounds what a replay
//! can do after a *receiver* restart (which forgets every window) to
//! datagrams recorded within the last window. Peers' clocks must agree
//! within the window (NTP).
//!
//! A sender's state is forgotten only once idle for 2W: a datagram accepted
//! at receiver time t was sent at most W ahead of t, so it stays fresh until
//! t + 2W at the latest. Forgotten any sooner, a sender whose clock runs
//! ahead could have a captured datagram replayed once.
//!
//! At most `max_senders` senders are tracked; a datagram from a new sender
//! when all of them were heard within 2W is refused
//! ([`Reject::TooManySenders`]): evicting a live window would reopen replays.

use std::collections::HashMap;
use std::net::SocketAddr;

use ipnet::IpNet;

use crate::auth::Key;
use crate::wire::{self, Datagram, Reject};

/// What a receiver accepts.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Source networks accepted (a single address is a /32 or /128);
    /// empty: any (the MAC still applies).
    pub allowed: Vec<IpNet>,
    /// Largest difference between a datagram's sent-at time and the
    /// receiver's clock (ms); an idle sender's window is kept twice as long.
    pub window_ms: u64,
    /// Most senders tracked at once ([`SENDER_BYTES`] each); datagrams from
    /// more are dropped until some are idle for twice the window.
    pub max_senders: usize,
}

/// Bytes of one slot of the sender table (8-byte id, 24-byte window, 1
/// control byte). The table has a power of two of slots above 8/7 of the
/// senders, so a sender costs 38 to 76 bytes (1024 senders: 66 KiB).
pub const SENDER_BYTES: usize = 33;

/// How long a sender's window outlives its last datagram: its datagrams
/// stay fresh up to 2W after they arrive (see the module notes).
fn keep_ms(window_ms: u64) -> u64 {
    window_ms.saturating_mul(2)
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    top: u64,
    /// Bit i: sequence number `top - i` was seen.
    seen: u64,
    last_ms: u64,
}

impl Window {
    fn new(seq: u64, now_ms: u64) -> Window {
        Window {
            top: seq,
            seen: 1,
            last_ms: now_ms,
        }
    }

    /// Marks `seq` seen; false if it was, or is too old to tell.
    fn admit(&mut self, seq: u64) -> bool {
        if seq > self.top {
            let shift = seq - self.top;
            self.seen = if shift >= 64 { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.top = seq;
            return true;
        }
        let back = self.top - seq;
        if back >= 64 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

pub use netaddr::{canonical_addr, canonical_net};

/// Authenticates and deduplicates datagrams for one socket.
pub struct Receiver {
    key: Key,
    own_id: u64,
    policy: Policy,
    senders: HashMap<u64, Window>,
}

impl Receiver {
    pub fn new(key: Key, own_id: u64, mut policy: Policy) -> Receiver {
        for n in &mut policy.allowed {
            *n = canonical_net(*n);
        }
        Receiver {
            key,
            own_id,
            policy,
            senders: HashMap::new(),
        }
    }

    /// Accepts `data` from `src` at `now_ms` (receiver's wall clock, ms
    /// since the Unix epoch), or says why not. Never panics, whatever the
    /// bytes.
    pub fn accept(
        &mut self,
        src: SocketAddr,
        data: &[u8],
        now_ms: u64,
    ) -> Result<Datagram, Reject> {
        wire::precheck(data)?;
        let ip = src.ip().to_canonical();
        if !self.policy.allowed.is_empty() && !self.policy.allowed.iter().any(|n| n.contains(&ip)) {
            return Err(Reject::UnknownSender);
        }
        let dg = wire::open(&self.key, data)?;
        if dg.sender == self.own_id {
            return Err(Reject::Own);
        }
        if dg.sent_ms.abs_diff(now_ms) > self.policy.window_ms {
            return Err(Reject::Stale);
        }
        match self.senders.get_mut(&dg.sender) {
            Some(w) => {
                if !w.admit(dg.seq) {
                    return Err(Reject::Replay);
                }
                // Never backwards: a receiver clock stepped back must not
                // shorten how long the window is kept.
                w.last_ms = w.last_ms.max(now_ms);
            }
            None => {
                if self.senders.len() >= self.policy.max_senders {
                    let keep = keep_ms(self.policy.window_ms);
                    self.senders
                        .retain(|_, w| now_ms.saturating_sub(w.last_ms) <= keep);
                    if self.senders.len() >= self.policy.max_senders {
                        return Err(Reject::TooManySenders);
                    }
                }
                self.senders.insert(dg.sender, Window::new(dg.seq, now_ms));
            }
        }
        Ok(dg)
    }

    /// Senders tracked now.
    pub fn senders(&self) -> usize {
        self.senders.len()
    }
}
