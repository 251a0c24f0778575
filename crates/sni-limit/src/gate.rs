//! One selector and one connection's decision at the client hello.
//!
//! In order, each step cheaper than the handshake it may spare:
//! 1. `exclude`: a listed address passes untouched, counted toward nothing;
//! 2. `per-ip` (ours): the address's own concurrent connections and rate,
//!    in a bounded keyed table (a refused address spends nothing more);
//! 3. `ip-rep`: the address's rank in the sieve; under pressure (the share
//!    of `limit` in use above `percentage`) the hottest ranks are refused;
//! 4. `rate`, `limit` and `queue`: the selector's [`Limiter`], the engine of
//!    the remap rules: go, wait (for the rate, then a slot, at most
//!    `max-age`), or be refused.
//!
//! A connection that goes keeps a [`Hold`] until it closes: dropping it
//! frees its slots, and a freed selector slot goes to the oldest parked
//! handshake at once.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use limits::{Clock, MonotonicClock, Nanos, Permit, Waiter, NANOS_PER_SEC};
use netaddr::CidrList;
use rate_limit_core::{Admission, KeyedLimiter, Limits, Refused, RuleLimiter, Wait};

use crate::config::{Config, IpRepConf, PerIpConf, Rate, SelectorConf};
use crate::sieve::{self, Sieve, SieveParams};

/// The waiter of a limiter that never queues (`per-ip`: no queue places).
pub enum NoWait {}

impl Waiter for NoWait {
    fn admit(self, _: Permit<Self>) -> Result<(), Permit<Self>> {
        match self {}
    }
}

/// Why a handshake was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its address is over its `per-ip` limit or rate.
    PerIp,
    /// `per-ip`: every address tracked holds a connection (the table is full).
    PerIpTable,
    /// The sieve ranks its address among the hottest while under pressure.
    IpRep,
    /// Over the selector's rate, and it could not wait for it.
    Rate,
    /// At the selector's limit, and no queue place.
    Full,
    /// Waited `max-age` (or Traffic Server's handshake timeout) in the queue.
    Expired,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Refusal::PerIp,
        Refusal::PerIpTable,
        Refusal::IpRep,
        Refusal::Rate,
        Refusal::Full,
        Refusal::Expired,
    ];

    /// The word `show` and the debug log use.
    pub fn word(self) -> &'static str {
        match self {
            Refusal::PerIp => "per_ip",
            Refusal::PerIpTable => "per_ip_table",
            Refusal::IpRep => "ip_rep",
            Refusal::Rate => "rate",
            Refusal::Full => "full",
            Refusal::Expired => "expired",
        }
    }
}

/// A selector's counts since its file was loaded, for `show`.
#[derive(Default)]
pub struct Counts {
    pub admitted: AtomicU64,
    pub queued: AtomicU64,
    pub resumed: AtomicU64,
    pub abandoned: AtomicU64,
    pub excluded: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
}

impl Counts {
    pub fn refused(&self, why: Refusal) -> u64 {
        self.refused[why as usize].load(Ordering::Relaxed)
    }

    pub fn refuse(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// What lives on across a reload for a selector of the same SNI: its
/// connections keep counting against the new limits.
struct Live<W: Waiter, C: Clock> {
    limiter: Option<RuleLimiter<W, C>>,
    per_ip: Option<KeyedLimiter<NoWait, C>>,
    /// Connections holding a [`Hold`] of this selector (or its predecessors).
    open: Arc<AtomicU32>,
}

/// One `selector:` entry, built.
pub struct Selector<W: Waiter, C: Clock = MonotonicClock> {
    conf: SelectorConf,
    live: Live<W, C>,
    per_ip_conf: Option<PerIpConf>,
    sieve: Option<Arc<IpRep>>,
    exclude: Option<Arc<CidrList>>,
    pub counts: Counts,
    clock: C,
}

/// One `ip-rep:` entry, built: its sieve and the secret that keys it, shared
/// by every selector naming it (`Selectors::build`), and its pressure
/// threshold.
pub(crate) struct IpRep {
    name: String,
    sieve: Arc<Sieve>,
    /// Keys the sieve by address with a secret, so clients cannot choose
    /// where in it they land.
    seed: RandomState,
    percentage: u8,
    buckets: u8,
}

impl IpRep {
    /// The ip-rep of `r`; `old` (the same name in the file being replaced)
    /// hands over what its sieve learned if its sizing is unchanged.
    /// `None` if `size` is 0 (off).
    pub(crate) fn build(r: &IpRepConf, old: Option<&IpRep>) -> Option<Arc<IpRep>> {
        if r.size == 0 {
            return None;
        }
        let secs = |s: u32| u64::from(s) * NANOS_PER_SEC;
        let params = SieveParams {
            buckets: r.buckets,
            size: r.size,
            max_age: r.max_age.map(secs),
            perma: r.perma.map(|p| sieve::Perma {
                limit: p.limit,
                threshold: p.threshold,
                max_age: p.max_age.map(secs),
            }),
        };
        let kept = old
            .filter(|o| o.name == r.name && *o.sieve.params() == params)
            .map(|o| (o.sieve.clone(), o.seed.clone()));
        let (sieve, seed) =
            kept.unwrap_or_else(|| (Arc::new(Sieve::new(params)), RandomState::new()));
        Some(Arc::new(IpRep {
            name: r.name.clone(),
            sieve,
            seed,
            percentage: r.percentage,
            buckets: r.buckets,
        }))
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// The decision for one connection.
pub enum Verdict<W: Waiter, C: Clock = MonotonicClock> {
    /// On the selector's `exclude` list: it passes, held by nothing.
    Excluded,
    /// It goes on now; keep the hold until the connection closes.
    Go(Hold<W, C>),
    /// It waits (queue): for the rate (`wait.rate_delay`), then a slot.
    Wait(Pending<W, C>),
    /// Its handshake fails.
    Refuse(Refusal),
}

/// What an admitted connection holds until it closes.
#[must_use = "dropping the hold frees the connection's slots at once"]
pub struct Hold<W: Waiter, C: Clock = MonotonicClock> {
    _slot: Option<Permit<W>>,
    _per_ip: Option<Permit<NoWait>>,
    open: Arc<AtomicU32>,
    _clock: std::marker::PhantomData<C>,
}

impl<W: Waiter, C: Clock> Drop for Hold<W, C> {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<W: Waiter, C: Clock> Hold<W, C> {
    fn new(slot: Option<Permit<W>>, per_ip: Option<Permit<NoWait>>, open: &Arc<AtomicU32>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Hold {
            _slot: slot,
            _per_ip: per_ip,
            open: open.clone(),
            _clock: std::marker::PhantomData,
        }
    }
}

/// A connection that waits: its decided wait, and the `per-ip` slot it
/// holds meanwhile (a parked connection is an open one).
pub struct Pending<W: Waiter, C: Clock = MonotonicClock> {
    pub wait: Wait<W, C>,
    per_ip: Option<Permit<NoWait>>,
}

impl<W: Waiter, C: Clock> Pending<W, C> {
    /// Splits the wait from the `per-ip` slot, which the waiter keeps.
    pub fn into_parts(self) -> (Wait<W, C>, Option<Permit<NoWait>>) {
        (self.wait, self.per_ip)
    }
}

impl<W: Waiter, C: Clock + Clone> Selector<W, C> {
    /// Builds the selector of `conf` (of `config`), with its ip-rep (built
    /// once for every selector naming it), taking over `old`'s live
    /// state (the selector of the same SNI in the file being replaced) when
    /// its shape allows: a limiter keeps its slots, parked handshakes and
    /// bucket and takes the new limits; a changed `limit`/`rate` presence
    /// (or `per-ip` table size) starts afresh, its old connections counting
    /// against the old limiter until they close.
    pub(crate) fn build(
        config: &Config,
        conf: &SelectorConf,
        rep: Option<Arc<IpRep>>,
        old: Option<&Arc<Selector<W, C>>>,
        clock: C,
    ) -> Arc<Self> {
        let limits = Limits {
            limit: conf.limit,
            rate: conf.rate.map(|r| (r.per_second, r.burst)),
            queue: conf.queue.map_or(0, |q| q.size),
            maxage: conf
                .queue
                .and_then(|q| q.max_age)
                .map(|s| u64::from(s) * NANOS_PER_SEC),
            block: None,
            auto: None,
        };
        let wants = conf.limit.is_some() || conf.rate.is_some();
        let limiter = old
            .and_then(|o| o.live.limiter.clone())
            .filter(|l| wants && l.reconfigure(limits).is_ok())
            .or_else(|| wants.then(|| RuleLimiter::new(limits, clock.clone())));
        let per_ip = conf.per_ip.map(|p| {
            let l = Limits {
                limit: p.limit,
                rate: p.rate.map(|Rate { per_second, burst }| (per_second, burst)),
                queue: 0,
                maxage: None,
                block: None,
                auto: None,
            };
            old.filter(|o| o.per_ip_conf.is_some_and(|q| q.keys == p.keys))
                .and_then(|o| o.live.per_ip.clone())
                .filter(|t| t.reconfigure(l).is_ok())
                .unwrap_or_else(|| KeyedLimiter::new(l, p.keys, clock.clone()))
        });
        Arc::new(Selector {
            conf: conf.clone(),
            live: Live {
                limiter,
                per_ip,
                open: old.map_or_else(|| Arc::new(AtomicU32::new(0)), |o| o.live.open.clone()),
            },
            per_ip_conf: conf.per_ip,
            sieve: rep,
            exclude: conf
                .exclude
                .and_then(|i| config.lists.get(i))
                .map(|l| l.cidrs.clone()),
            counts: Counts::default(),
            clock,
        })
    }
}

impl<W: Waiter, C: Clock> Selector<W, C> {
    pub fn conf(&self) -> &SelectorConf {
        &self.conf
    }

    /// The selector's limiter (rate, limit, queue); `None` if it has neither.
    pub fn limiter(&self) -> Option<&RuleLimiter<W, C>> {
        self.live.limiter.as_ref()
    }

    /// Connections open under this selector (holding a [`Hold`]).
    pub fn open(&self) -> u32 {
        self.live.open.load(Ordering::Relaxed)
    }

    /// Addresses `per-ip` tracks now, if it has a table.
    pub fn per_ip_keys(&self) -> Option<usize> {
        self.live
            .per_ip
            .as_ref()
            .and_then(|l| l.keys())
            .map(|t| t.len())
    }

    /// The ip-rep's name and its sieve, if on.
    pub fn ip_rep(&self) -> Option<(&str, &Sieve)> {
        self.sieve.as_ref().map(|s| (s.name.as_str(), &*s.sieve))
    }

    /// The pressure now: `None` below `percentage` of the limit (or
    /// without an ip-rep), else the rank from which addresses are refused.
    pub fn pressure(&self) -> Option<u8> {
        let rep = self.sieve.as_ref()?;
        let slots = self.live.limiter.as_ref()?.slots()?;
        sieve::pressure(slots.active(), slots.limit(), rep.percentage, rep.buckets)
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// What a connection that waited holds once its wait is over: `slot`
    /// (if the selector has a limit) and the `per-ip` slot it kept.
    pub fn hold(&self, slot: Option<Permit<W>>, per_ip: Option<Permit<NoWait>>) -> Hold<W, C> {
        self.counts.resumed.fetch_add(1, Ordering::Relaxed);
        Hold::new(slot, per_ip, &self.live.open)
    }

    /// Decides the connection of client address `ip` (its remote address;
    /// `None` when Traffic Server knows none: then only the selector's own
    /// limits apply).
    pub fn admit(&self, ip: Option<IpAddr>) -> Verdict<W, C> {
        let ip = ip.map(netaddr::canonical);
        if let (Some(list), Some(ip)) = (&self.exclude, ip) {
            if list.contains(ip) {
                self.counts.excluded.fetch_add(1, Ordering::Relaxed);
                return Verdict::Excluded;
            }
        }
        let mut per_ip = None;
        if let (Some(table), Some(ip)) = (&self.live.per_ip, ip) {
            match table.admit(table.key(&address_key(ip)), &[]) {
                Admission::Go(p) => per_ip = p,
                Admission::Reject(Refused::KeyTableFull) => {
                    return self.refuse(Refusal::PerIpTable)
                }
                // No queue places: it never waits.
                Admission::Wait(_) | Admission::Reject(_) => return self.refuse(Refusal::PerIp),
            }
        }
        if let (Some(rep), Some(ip)) = (&self.sieve, ip) {
            let hit = rep
                .sieve
                .increment(rep.seed.hash_one(address_key(ip)), self.clock.now());
            if sieve::refused(self.pressure(), hit) {
                return self.refuse(Refusal::IpRep);
            }
        }
        let Some(limiter) = &self.live.limiter else {
            self.counts.admitted.fetch_add(1, Ordering::Relaxed);
            return Verdict::Go(Hold::new(None, per_ip, &self.live.open));
        };
        match limiter.admit() {
            Admission::Go(slot) => {
                self.counts.admitted.fetch_add(1, Ordering::Relaxed);
                Verdict::Go(Hold::new(slot, per_ip, &self.live.open))
            }
            Admission::Wait(wait) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
                Verdict::Wait(Pending { wait, per_ip })
            }
            Admission::Reject(Refused::Rate) => self.refuse(Refusal::Rate),
            Admission::Reject(_) => self.refuse(Refusal::Full),
        }
    }

    fn refuse(&self, why: Refusal) -> Verdict<W, C> {
        self.counts.refuse(why);
        Verdict::Refuse(why)
    }
}

/// The bytes an address is limited by: an IPv4 address, or an IPv6 /64
/// (one subscriber's network; an attacker gets a /64 for free).
fn address_key(ip: IpAddr) -> [u8; 9] {
    let mut k = [0u8; 9];
    match ip {
        IpAddr::V4(a) => k[1..5].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => {
            k[0] = 6;
            k[1..9].copy_from_slice(&a.octets()[..8]);
        }
    }
    k
}

#[cfg(test)]
mod tests;
