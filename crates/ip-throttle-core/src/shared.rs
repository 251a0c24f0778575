//! The per-IP record that proxies share through a store (memcached or
//! Redis): Perlbal's `memcached_servers` with `instance_name`.
//!
//! - **What is shared:** the phase, when it next changes, the delay and the
//!   violations. Not the count of delayed requests: `max_concurrent` holds
//!   per host, as each host holds its own connections.
//! - **Times** are wall-clock milliseconds since the Unix epoch: proxies'
//!   monotonic clocks are unrelated. Their wall clocks are assumed
//!   NTP-close; an offset of e ms moves when another proxy sees a delay or
//!   a ban end by e ms.
//! - **Text**, so an operator can read it with `get`:
//!   `1 <phase> <at_ms> <delay_ms> <violations>`, at most [`MAX_RECORD`]
//!   bytes. A record that does not parse (another version, garbage) counts
//!   as absent: the IP is allowed, as when the store forgets it.
//! - **Read, modify, compare-and-swap** (memcached `gets`/`cas`, Redis
//!   `WATCH`/`MULTI`): [`request`] is pure, so a lost race runs it again on
//!   the newer record and no violation is lost (Perlbal's get then set
//!   raced).
//! - **Expiry:** a record lives until its IP would be allowed again without
//!   another request (probation: `threshold`; throttled: the delay's end
//!   plus `threshold`; banned: the ban's end), plus a second. Then the store
//!   drops it and the IP is allowed, which the state machine would say too.
//! - **Bounded trust:** a record read back is clamped to what this proxy's
//!   own parameters could produce (a delay at most `max_delay`, a ban at most
//!   `ban_expiration` from now), so a corrupt or foreign record cannot ban
//!   an IP for longer than a local ban would.

use std::fmt::Write as _;
use std::net::IpAddr;

use limits::Nanos;

use crate::state::{IpState, Params, Phase, Step};

/// The record format's version, its first field.
pub const VERSION: u32 = 1;
/// Longest record accepted (a written one is at most ~60 bytes).
pub const MAX_RECORD: usize = 96;
/// Longest `--instance` with a store: keys stay below memcached's 250 bytes.
pub const MAX_INSTANCE: usize = 200;
/// Longest record life: `--ban-expiration`'s bound (a year) and a day.
/// (memcached reads an expiry above 30 days as an absolute time; its store
/// writes such an expiry as one.)
pub const MAX_TTL_SECS: u64 = 366 * 24 * 3600;

const MS: u64 = 1_000_000;

/// The present moment on both clocks: the state machine's (monotonic) and
/// the wall clock that proxies share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    pub mono: Nanos,
    pub wall_ms: u64,
}

impl Now {
    fn to_wall_ms(self, t: Nanos) -> u64 {
        let ms =
            i128::from(self.wall_ms) + (i128::from(t) - i128::from(self.mono)) / i128::from(MS);
        ms.clamp(0, i128::from(u64::MAX)) as u64
    }

    fn to_mono(self, ms: u64) -> Nanos {
        let t =
            i128::from(self.mono) + (i128::from(ms) - i128::from(self.wall_ms)) * i128::from(MS);
        t.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// What the store keeps for an IP that is not allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Probation, throttled or banned; an allowed IP has no record.
    pub phase: Phase,
    /// As `IpState`'s `at`, on the wall clock.
    pub at_ms: u64,
    pub delay_ms: u64,
    pub violations: u32,
}

impl Record {
    /// The shared part of `s`; `None` if the IP is allowed.
    pub fn of(s: &IpState, now: Now) -> Option<Record> {
        let (phase, at, delay, violations) = s.shared_parts();
        (phase != Phase::Allowed).then(|| Record {
            phase,
            at_ms: now.to_wall_ms(at),
            // Rounded to the nearest ms: configured delays round-trip exactly.
            delay_ms: delay.saturating_add(MS / 2) / MS,
            violations,
        })
    }

    /// `local` with this record's shared part, clamped to what `p` allows.
    pub fn onto(self, local: IpState, now: Now, p: &Params) -> IpState {
        let delay = self.delay_ms.saturating_mul(MS).min(p.max_delay);
        let at = now.to_mono(self.at_ms);
        let at = match self.phase {
            // A probation or throttling cannot have started in the future.
            Phase::Probation => at.min(now.mono),
            Phase::Throttled => at.min(now.mono.saturating_add(delay)),
            Phase::Banned => at.min(now.mono.saturating_add(p.ban_expiration)),
            Phase::Allowed => 0,
        };
        local.with_shared(self.phase, at, delay, self.violations)
    }

    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(64);
        let _ = write!(
            s,
            "{VERSION} {} {} {} {}",
            self.phase.name(),
            self.at_ms,
            self.delay_ms,
            self.violations
        );
        s
    }

    /// `None` for anything but a well-formed record of this version.
    pub fn decode(b: &[u8]) -> Option<Record> {
        if b.len() > MAX_RECORD {
            return None;
        }
        let text = std::str::from_utf8(b).ok()?;
        let mut f = text.split(' ');
        if f.next()?.parse::<u32>().ok()? != VERSION {
            return None;
        }
        let phase = match f.next()? {
            "probation" => Phase::Probation,
            "throttled" => Phase::Throttled,
            "banned" => Phase::Banned,
            _ => return None,
        };
        let r = Record {
            phase,
            at_ms: f.next()?.parse().ok()?,
            delay_ms: f.next()?.parse().ok()?,
            violations: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(r)
    }

    /// Seconds the store should keep the record: until its IP would be
    /// allowed again with no further request, plus one; at least one.
    pub fn ttl_secs(&self, now: Now, p: &Params) -> u64 {
        let threshold_ms = p.threshold / MS;
        let end_ms = match self.phase {
            Phase::Probation => self.at_ms.saturating_add(threshold_ms),
            Phase::Throttled => self
                .at_ms
                .saturating_add(self.delay_ms)
                .saturating_add(threshold_ms),
            Phase::Banned | Phase::Allowed => self.at_ms,
        };
        let left_ms = end_ms.saturating_sub(now.wall_ms);
        left_ms.div_ceil(1000).saturating_add(1).min(MAX_TTL_SECS)
    }
}

/// The store key of a record: `ipt:<instance>:<ip>`, or with a prefix
/// shorter than the address `ipt:<instance>:<network>/<len>` (the unit
/// `--key-prefix` keeps state for: an IPv6 client owns its /64). `net`:
/// the masked address, its prefix length and the address's full length.
/// Proxies that share a store but not state use distinct instances.
pub fn key(instance: &str, net: (IpAddr, u8, u8)) -> String {
    let (addr, len, full) = net;
    match len >= full {
        true => format!("ipt:{instance}:{}", crate::lists::canonical(addr)),
        false => format!("ipt:{instance}:{addr}/{len}"),
    }
}

/// The store key of the record every unknown client shares
/// (`ipt:<instance>:unknown`): no address is spelt so.
pub fn unknown_key(instance: &str) -> String {
    format!("ipt:{instance}:{}", crate::Client::Unknown)
}

/// Checks an `--instance` name: it becomes part of store keys, which
/// memcached wants printable, without spaces, at most 250 bytes.
pub fn valid_instance(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_INSTANCE && name.bytes().all(|b| b.is_ascii_graphic())
}

/// What to write back to the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing changed (a banned IP's request).
    Keep,
    /// Store this record (compare-and-swap against what was read).
    Set { value: String, ttl_secs: u64 },
    /// The IP is allowed: remove the record (if there was one).
    Delete,
}

/// The outcome of one request against the shared record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub step: Step,
    /// The new local state (its `delayed` counts a `Delay` step).
    pub state: IpState,
    pub write: Write,
    /// The request found a ban that had ended (an `unban` event).
    pub unbanned: bool,
}

/// One request of an IP that is subject to throttling, at `now`: the
/// store's record (`None` if it has none) replaces the shared part of the
/// local state, the state machine runs, and the result says what to write
/// back. Pure: after a lost compare-and-swap, run it again on the newer
/// record with the same `local`.
pub fn request(stored: Option<&[u8]>, local: IpState, now: Now, p: &Params) -> Update {
    let mut s = match stored.and_then(Record::decode) {
        Some(r) => r.onto(local, now, p),
        None => local.with_shared(Phase::Allowed, 0, 0, 0),
    };
    let unbanned = s.advance(now.mono, p);
    let step = s.request(now.mono, p);
    let write = match (step, Record::of(&s, now)) {
        (Step::Banned, _) => Write::Keep,
        (_, Some(r)) => Write::Set {
            value: r.encode(),
            ttl_secs: r.ttl_secs(now, p),
        },
        (_, None) => Write::Delete,
    };
    Update {
        step,
        state: s,
        write,
        unbanned,
    }
}
