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
//! A limiter's shape is its [`Scope`]: the rule scope (`rule_scope.rs`: one
//! bucket, slots and queue for every request, the slots optionally split
//! between fair flows) or the keyed scope (`key_scope.rs`: a table of
//! per-key buckets and slots, optionally peered, `peered.rs`). Each holds
//! only its own state. Callers see a limiter as its shape (`shaped.rs`):
//! [`RuleLimiter`], [`FairLimiter`] or [`KeyedLimiter`], each with only the
//! calls that fit it, and a request's [`Counted`] (the rule, a [`Flow`] or
//! a [`Key`]) made by that handle.
//!
//! Here: the limiter, its construction, limits and live changes. The
//! decisions handed back are `decision.rs`, the slot queue `queue.rs`,
//! reports `usage.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use keyed::KeyTable;
use limits::{Clock, GcraParams, MonotonicClock, Nanos, Slots, Waiter};

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
    /// The limits as last set, for reports; decisions read the atomics of
    /// the scope.
    limits: Mutex<Limits>,
    /// Bumped by each [`Limiter::reconfigure`], so readers can cache what
    /// they derive from the limits (a rule's RateLimit-Policy header).
    changes: AtomicU64,
    /// `--maxage`; `Nanos::MAX`: unbounded.
    maxage: AtomicU64,
    /// `--count-status`: the rate is only checked at admission and charged
    /// by responses ([`Limiter::charge`], see `charge.rs`). Part of the
    /// limiter's shape: set once, before it decides anything.
    on_response: AtomicBool,
    /// Whose limits the requests count against, and their state.
    scope: Scope<W>,
    clock: C,
}

/// A limiter's shape: which state it holds, and so which admission call
/// applies (see the module's doc).
enum Scope<W: Waiter> {
    /// One bucket, slots and queue for the whole rule (`--fair`: the slots
    /// shared between flows).
    Rule(RuleScope<W>),
    /// `--key`: each key's own bucket, slots and queue places.
    Keyed(KeyedScope<W>),
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// A limiter for the whole rule.
    pub fn new(limits: Limits, clock: C) -> Arc<Self> {
        Arc::new(Limiter::with_scope(
            limits,
            clock,
            Scope::Rule(RuleScope::plain(limits)),
        ))
    }

    /// A limiter whose limits apply to each key (at most `keys` held at once).
    pub fn keyed(limits: Limits, keys: usize, clock: C) -> Arc<Self> {
        let table = KeyTable::new(keys);
        Arc::new(Limiter::with_scope(
            limits,
            clock,
            Scope::Keyed(KeyedScope::new(limits, table, None)),
        ))
    }

    fn with_scope(limits: Limits, clock: C, scope: Scope<W>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Limiter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limits: Mutex::new(limits),
            changes: AtomicU64::new(0),
            maxage: AtomicU64::new(limits.maxage.unwrap_or(Nanos::MAX)),
            on_response: AtomicBool::new(false),
            scope,
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
        let limit = new.limit.unwrap_or(u32::MAX);
        match &self.scope {
            Scope::Rule(r) => r.reconfigure(params, limit, new.queue),
            Scope::Keyed(k) => k.reconfigure(params, limit, new.queue),
        }
        Ok(())
    }

    fn max_wait(&self) -> Nanos {
        self.maxage.load(Ordering::Relaxed)
    }

    /// The keyed table (with `--key`), for hashing keys and for its counters.
    #[inline]
    pub fn keys(&self) -> Option<&KeyTable<Keyed<W>>> {
        match &self.scope {
            Scope::Keyed(k) => Some(&k.table),
            Scope::Rule(_) => None,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The rule-wide slots (not keyed).
    pub fn slots(&self) -> Option<&Arc<Slots<W>>> {
        match &self.scope {
            Scope::Rule(r) => r.slots(),
            Scope::Keyed(_) => None,
        }
    }

    /// Requests waiting right now for the rule-wide limits (for the rate or
    /// a slot); keyed waits are counted per key (0 here).
    pub fn queued(&self) -> u32 {
        match &self.scope {
            Scope::Rule(r) => r.budget.used(),
            Scope::Keyed(_) => 0,
        }
    }

    /// Decides a new request of a rule-scoped limiter: the rate bucket
    /// first, then a slot (on a fair limiter, in the flow of the empty
    /// value). A keyed limiter refuses it ([`Refused::KeyMissing`]): the
    /// plugin applies `--key-missing` before asking.
    pub(crate) fn admit_rule(self: &Arc<Self>) -> Admission<W, C> {
        match &self.scope {
            Scope::Rule(r) => self.admit_in_rule(r, 0),
            Scope::Keyed(_) => Admission::Reject(Refused::KeyMissing),
        }
    }

    /// [`admit_rule`](Self::admit_rule) for a request of `flow` (a
    /// [`flow_key`](Self::flow_key)) on a fair limiter (`--fair`), which
    /// shares its slots between flows. A rule limiter that is not fair
    /// ignores the flow; a keyed limiter refuses ([`Refused::KeyMissing`]):
    /// a flow is no client key.
    pub(crate) fn admit_flow(self: &Arc<Self>, flow: u64) -> Admission<W, C> {
        match &self.scope {
            Scope::Rule(r) => self.admit_in_rule(r, flow),
            Scope::Keyed(_) => Admission::Reject(Refused::KeyMissing),
        }
    }

    /// Decides a new request of a keyed limiter under `key` (a hash of
    /// [`keys`](Self::keys)): its bucket first, then its slot. Refused when
    /// every key held is busy (the table is full of keys holding slots or
    /// waiters). A rule-scoped limiter ignores the key and applies the
    /// rule's limits, which bind every request anyway; a fair one puts it in
    /// flow 0 (the plugin never asks so: `--fair` excludes `--key`, and its
    /// requests come through [`admit_flow`](Self::admit_flow)).
    #[cfg(test)]
    pub(crate) fn admit_key(self: &Arc<Self>, key: u64) -> Admission<W, C> {
        self.admit_key_tagged(key, &[])
    }

    /// [`admit_key`](Self::admit_key) for a peered limiter: `tag` is the
    /// key's peer tag (whose hash is `key`), kept with the key for its
    /// reports. Other keyed limiters ignore it.
    pub(crate) fn admit_key_tagged(self: &Arc<Self>, key: u64, tag: &[u8]) -> Admission<W, C> {
        match &self.scope {
            Scope::Keyed(k) => self.admit_in_key(k, key, tag),
            Scope::Rule(r) => self.admit_in_rule(r, 0),
        }
    }

    /// One call for every scope: `key` is the key (keyed), the flow (fair)
    /// or absent ([`Shaped::admit`], and tests written against every scope).
    pub(crate) fn admit_in_scope(
        self: &Arc<Self>,
        key: Option<u64>,
        tag: &[u8],
    ) -> Admission<W, C> {
        match (&self.scope, key) {
            (_, None) => self.admit_rule(),
            (Scope::Rule(_), Some(f)) => self.admit_flow(f),
            (Scope::Keyed(_), Some(k)) => self.admit_key_tagged(k, tag),
        }
    }
}

mod charge;
mod decision;
mod dry_run;
mod fair;
mod key_scope;
mod peered;
mod queue;
mod rule_scope;
mod shaped;
#[cfg(test)]
mod tests;
mod usage;

pub use decision::{Admission, RateToken, Refused, SlotWait, Wait};
pub use key_scope::Keyed;
use key_scope::KeyedScope;
pub use peered::MAX_PEER_DEBT;
use rule_scope::RuleScope;
pub use shaped::{Counted, FairLimiter, Flow, Key, KeyedLimiter, RuleLimiter, Shaped};
pub use usage::{KeyUsage, Usage};
