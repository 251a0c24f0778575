//! Admission decisions of one limiter: a rate bucket, concurrency slots with
//! a FIFO queue, a bounded number of queue places and a maximum wait, for
//! the whole rule or, keyed (`--key`), for each client key.
//!
//! Pure: inputs in, decisions out, time from an injected [`Clock`]. The
//! plugin maps the decisions to hooks and timers; nothing here knows about
//! transactions. Resources given out are guards that give themselves back:
//! a [`Permit`](limits::Permit) frees its slot, a
//! [`BudgetToken`](limits::BudgetToken) its queue place, and a [`RateToken`]
//! returns its rate token unless the request was served.
//!
//! Here: the limiter, its construction, limits and live changes. The rule
//! scope is `rule_scope.rs`, the keyed scope `key_scope.rs`, the decisions
//! handed back `decision.rs`, the slot queue `queue.rs`, reports `usage.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use keyed::KeyTable;
use limits::{Budget, Clock, Gcra, GcraParams, LiveParams, MonotonicClock, Nanos, Slots, Waiter};

/// What a limiter enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Concurrent holders; `None`: no concurrency limit.
    pub limit: Option<u32>,
    /// Requests per second and burst; `None`: no rate limit.
    pub rate: Option<(f64, u32)>,
    /// Most requests waiting at once (for the rate or a slot).
    pub queue: u32,
    /// Longest wait; `None`: unbounded.
    pub maxage: Option<Nanos>,
}

impl Limits {
    pub fn of(o: &crate::Options) -> Limits {
        Limits {
            limit: o.limit,
            rate: o.rate.map(|r| (r, o.burst)),
            queue: o.queue,
            maxage: o.maxage_nanos(),
        }
    }
}

/// One limiter's state. Shared (`Arc`) by the requests it admits, and by
/// the rules of a group. Its limits can change live ([`Limiter::reconfigure`]).
pub struct Limiter<W: Waiter, C: Clock = MonotonicClock> {
    /// Unique in the process (never reused, unlike an address).
    id: u64,
    /// The limits as last set, for reports; decisions read the atomics below.
    limits: Mutex<Limits>,
    /// Bumped by each [`Limiter::reconfigure`], so readers can cache what
    /// they derive from the limits (a rule's RateLimit-Policy header).
    changes: AtomicU64,
    /// Each key's concurrency limit (keyed; the rule-wide one is in `slots`).
    key_limit: AtomicU32,
    /// Each key's queue places (keyed; the rule-wide ones are in `budget`).
    key_queue: AtomicU32,
    /// `--maxage`; `Nanos::MAX`: unbounded.
    maxage: AtomicU64,
    /// Has a concurrency limit (part of the limiter's shape).
    has_limit: bool,
    slots: Option<Arc<Slots<W>>>,
    bucket: Option<Gcra>,
    budget: Arc<Budget>,
    /// With `--key`: each key's own bucket, slots and queue places.
    keys: Option<KeyTable<Keyed<W>>>,
    /// With `--key`: the keys' slot queues that have had waiters since the
    /// last departure check (by address), so the check visits those, not
    /// every key.
    waiting_queues: Mutex<HashMap<usize, Weak<Slots<W>>>>,
    /// Each key's bucket parameters (keyed).
    params: Option<LiveParams>,
    /// Joins the peer exchange (`--peers`): keys carry their peer tag and
    /// the hits not yet reported (see `peer.rs`).
    peered: bool,
    /// Peered: the unreported hits of keys evicted since the last report,
    /// per shard of `keys` (bounded, see `dthrottle::evicted`).
    evicted_hits: dthrottle::ShardedEvictedHits,
    /// With `--fair`: hashes flow keys (secret per limiter, so clients
    /// cannot aim at one another's flows; see `fair.rs`).
    flow_seed: std::hash::RandomState,
    /// `--count-status`: the rate is only checked at admission and charged
    /// by responses ([`Limiter::charge`], see `charge.rs`). Part of the
    /// limiter's shape: set once, before it decides anything.
    on_response: AtomicBool,
    clock: C,
}

/// One key's limits: its bucket's TAT, and (boxed, allocated the first time
/// the key needs them) its slots and queue places. 16 bytes inline.
pub struct Keyed<W: Waiter> {
    tat: Nanos,
    queues: Option<Box<KeyQueues<W>>>,
}

struct KeyQueues<W: Waiter> {
    slots: Option<Arc<Slots<W>>>,
    budget: Option<Arc<Budget>>,
    /// Peered limiters only: the key's tag and unreported hits.
    peer: Option<PeerKey>,
    /// `--count-status`: until when charges keep the key refused (0: never
    /// locked out). Forgetting it would hand the client a fresh burst.
    locked_until: Nanos,
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// A limiter for the whole rule.
    pub fn new(limits: Limits, clock: C) -> Arc<Self> {
        Arc::new(Limiter {
            slots: limits.limit.map(Slots::new),
            bucket: limits.rate.map(|(r, b)| Gcra::per_second(r, b)),
            budget: Budget::new(limits.queue),
            keys: None,
            params: None,
            ..Limiter::base(limits, clock)
        })
    }

    /// A limiter whose limits apply to each key (at most `keys` held at once).
    pub fn keyed(limits: Limits, keys: usize, clock: C) -> Arc<Self> {
        Arc::new(Limiter {
            slots: None,
            bucket: None,
            budget: Budget::new(0),
            keys: Some(KeyTable::new(keys)),
            params: limits
                .rate
                .map(|(r, b)| LiveParams::new(GcraParams::per_second(r, b))),
            ..Limiter::base(limits, clock)
        })
    }

    fn base(limits: Limits, clock: C) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Limiter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limits: Mutex::new(limits),
            changes: AtomicU64::new(0),
            key_limit: AtomicU32::new(limits.limit.unwrap_or(u32::MAX)),
            key_queue: AtomicU32::new(limits.queue),
            maxage: AtomicU64::new(limits.maxage.unwrap_or(Nanos::MAX)),
            has_limit: limits.limit.is_some(),
            slots: None,
            bucket: None,
            budget: Budget::new(0),
            keys: None,
            waiting_queues: Mutex::new(HashMap::new()),
            params: None,
            peered: false,
            evicted_hits: dthrottle::ShardedEvictedHits::new(0, 1),
            flow_seed: std::hash::RandomState::new(),
            on_response: AtomicBool::new(false),
            clock,
        }
    }

    /// Unique among the limiters of this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        *self.limits.lock()
    }

    /// How many times the limits were changed: a value derived from
    /// [`Limiter::limits`] is current while this has not moved.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Changes the limits of the live limiter: slots held, waiters, queue
    /// places and buckets carry over. A raised limit admits waiters at once
    /// (inside this call: their `admit` runs here). A lowered one preempts
    /// nobody; a changed rate keeps each bucket's level (as time).
    ///
    /// Whether there is a concurrency limit and whether there is a rate is
    /// the limiter's shape: changing either is refused with the option's
    /// name, and the caller builds a new limiter.
    pub fn reconfigure(&self, new: Limits) -> Result<(), &'static str> {
        let mut cur = self.limits.lock();
        if cur.limit.is_some() != new.limit.is_some() {
            return Err("--limit");
        }
        if cur.rate.is_some() != new.rate.is_some() {
            return Err("--rate");
        }
        *cur = new;
        self.changes.fetch_add(1, Ordering::Release);
        drop(cur);
        self.maxage
            .store(new.maxage.unwrap_or(Nanos::MAX), Ordering::Relaxed);
        let params = new.rate.map(|(r, b)| GcraParams::per_second(r, b));
        if let (Some(b), Some(p)) = (&self.bucket, params) {
            b.set_params(p);
        }
        if let (Some(live), Some(p)) = (&self.params, params) {
            live.set(p);
        }
        self.budget.set_max(new.queue);
        self.key_queue.store(new.queue, Ordering::Relaxed);
        let limit = new.limit.unwrap_or(u32::MAX);
        self.key_limit.store(limit, Ordering::Relaxed);
        if let Some(s) = &self.slots {
            s.set_flow_queue(new.queue);
            s.set_limit(limit);
        }
        if let Some(t) = &self.keys {
            // Clones first: raising a limit admits waiters, which must not
            // run under the table's locks.
            let mut held = Vec::new();
            t.for_each(|_, st| {
                if let Some(q) = &st.queues {
                    held.push((q.slots.clone(), q.budget.clone()));
                }
            });
            for (slots, budget) in held {
                if let Some(b) = budget {
                    b.set_max(new.queue);
                }
                if let Some(s) = slots {
                    s.set_limit(limit);
                }
            }
        }
        Ok(())
    }

    /// Each key's concurrency limit; `None`: not keyed, or no concurrency limit.
    fn key_limit(&self) -> Option<u32> {
        self.keys.as_ref()?;
        self.has_limit
            .then(|| self.key_limit.load(Ordering::Relaxed))
    }

    fn max_wait(&self) -> Nanos {
        self.maxage.load(Ordering::Relaxed)
    }

    fn key_params(&self) -> Option<GcraParams> {
        self.params.as_ref().map(LiveParams::get)
    }

    /// The keyed table (with `--key`), for hashing keys and for its counters.
    pub fn keys(&self) -> Option<&KeyTable<Keyed<W>>> {
        self.keys.as_ref()
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The rule-wide slots (not keyed).
    pub fn slots(&self) -> Option<&Arc<Slots<W>>> {
        self.slots.as_ref()
    }

    /// Requests waiting right now for the rule-wide limits (for the rate or
    /// a slot); keyed waits are counted per key.
    pub fn queued(&self) -> u32 {
        self.budget.used()
    }

    /// Decides a new request: the rate bucket first, then a slot. `key`
    /// (with `--key`) selects the client's own limits; a keyed limiter
    /// refuses a request without one, and refuses when every key it holds
    /// is busy (the table is full of keys holding slots or waiters).
    pub fn admit(self: &Arc<Self>, key: Option<u64>) -> Admission<W, C> {
        self.admit_tagged(key, &[])
    }

    /// [`admit`](Self::admit) for a peered limiter: `tag` is the key's peer
    /// tag (whose hash is `key`), kept with the key for its reports. Other
    /// limiters ignore it.
    pub fn admit_tagged(self: &Arc<Self>, key: Option<u64>, tag: &[u8]) -> Admission<W, C> {
        match (&self.keys, key) {
            (None, flow) => self.admit_rule(flow),
            (Some(t), Some(k)) => self.admit_key(t, k, tag),
            (Some(_), None) => Admission::Reject(Refused::KeyMissing),
        }
    }
}

mod charge;
mod decision;
mod dry_run;
mod fair;
mod key_scope;
mod peer;
mod queue;
mod rule_scope;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod top_tests;
mod usage;

pub use decision::{Admission, RateToken, Refused, SlotWait, Wait};
use peer::PeerKey;
pub use peer::MAX_PEER_DEBT;
pub use usage::{KeyUsage, Usage};
