//! Accepting datagrams: sender allow-list, MAC, freshness and replay window.
//!
//! # Replays and restarts
//! Every process picks a random 64-bit sender id when it starts and numbers
//! its datagrams from 0. A receiver keeps, per sender id, the highest
//! sequence number seen and a 64-datagram window below it: a number seen
//! before, or older than the window, is a replay. A restarted sender has a
//! new id, so it is never mistaken for a replayer; the old id's state is
//! forgotten once idle for the replay window. Datagrams also carry the
//! sender's wall-clock time and are refused when it differs from the
//! receiver's by more than the replay window: that bounds what a replay can
//! do after a *receiver* restart (which forgets every window) to datagrams
//! recorded within the last window. Peers' clocks must agree within the
//! window (NTP).

use std::collections::HashMap;
use std::net::SocketAddr;

use ipnet::{IpNet, Ipv4Net};

use crate::auth::Key;
use crate::wire::{self, Datagram, Reject};

/// What a receiver accepts.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Source networks accepted (a single address is a /32 or /128);
    /// empty: any (the MAC still applies).
    pub allowed: Vec<IpNet>,
    /// Largest difference between a datagram's sent-at time and the
    /// receiver's clock, and how long an idle sender's window is kept (ms).
    pub window_ms: u64,
    /// Most senders tracked at once; datagrams from more are dropped as
    /// unknown senders until some are idle for the window.
    pub max_senders: usize,
}

#[derive(Clone, Copy, Debug)]
struct Window {
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

/// `n` with an IPv4-mapped IPv6 network (`::ffff:a.b.c.d/96+`) written as
/// the IPv4 network it is, truncated: sources are checked as
/// [`std::net::IpAddr::to_canonical`], which never yields a mapped address.
pub fn canonical_net(n: IpNet) -> IpNet {
    let IpNet::V6(v6) = n else {
        return n.trunc();
    };
    match (v6.addr().to_ipv4_mapped(), v6.prefix_len().checked_sub(96)) {
        (Some(v4), Some(len)) => Ipv4Net::new(v4, len).map_or(n, IpNet::V4).trunc(),
        _ => n.trunc(),
    }
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4 (so it matches
/// canonical sources, and an IPv4 socket can send to it).
pub fn canonical_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

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
                w.last_ms = now_ms;
            }
            None => {
                if self.senders.len() >= self.policy.max_senders {
                    let window = self.policy.window_ms;
                    self.senders
                        .retain(|_, w| now_ms.saturating_sub(w.last_ms) <= window);
                    if self.senders.len() >= self.policy.max_senders {
                        return Err(Reject::UnknownSender);
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
