//! The [`Limiter`]: the scope it holds (`rule_scope.rs` or `key_scope.rs`),
//! its construction, limits and live changes. Its other calls are `impl
//! Limiter` blocks in the files that use this one (`admit.rs`, `queue.rs`,
//! `usage.rs`, ...), never the other way round.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use keyed::KeyTable;
use limits::{Clock, GcraParams, MonotonicClock, Nanos, Slots, Waiter};

use super::auto::Auto;
use super::bounds::Limits;
use super::key_scope::{Keyed, KeyedScope};
use super::rule_scope::RuleScope;

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
    /// `--block`; 0: none (see `block.rs`).
    pub(super) block: AtomicU64,
    /// `--limit=auto`: the controller that learns the rule-wide limit,
    /// and the slots it sets (see `auto.rs`). Part of the limiter's shape.
    pub(super) auto: Option<Auto<W>>,
    /// `--count-status`: the rate is only checked at admission and charged
    /// by responses ([`Limiter::charge`], see `charge.rs`). Part of the
    /// limiter's shape: set once, before it decides anything.
    pub(super) on_response: AtomicBool,
    /// Whose limits the requests count against, and their state.
    pub(super) scope: Scope<W>,
    pub(super) clock: C,
}

/// A limiter's shape: which state it holds, and so which admission call
/// applies (see the module `admission`'s doc).
pub(super) enum Scope<W: Waiter> {
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

    pub(super) fn with_scope(limits: Limits, clock: C, scope: Scope<W>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Limiter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limits: Mutex::new(limits),
            changes: AtomicU64::new(0),
            maxage: AtomicU64::new(limits.maxage.unwrap_or(Nanos::MAX)),
            block: AtomicU64::new(limits.block.unwrap_or(0)),
            auto: Auto::new(&limits, &scope),
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
        if cur.auto != new.auto {
            return Err("--limit");
        }
        *cur = new;
        self.changes.fetch_add(1, Ordering::Release);
        drop(cur);
        self.maxage
            .store(new.maxage.unwrap_or(Nanos::MAX), Ordering::Relaxed);
        self.block.store(new.block.unwrap_or(0), Ordering::Relaxed);
        let params = new.rate.map(|(r, b)| GcraParams::per_second(r, b));
        // A learned limit stays what the controller learned.
        let limit = match &self.auto {
            Some(a) => a.controller.limit(),
            None => new.limit.unwrap_or(u32::MAX),
        };
        match &self.scope {
            Scope::Rule(r) => r.reconfigure(params, limit, new.queue),
            Scope::Keyed(k) => k.reconfigure(params, limit, new.queue),
        }
        Ok(())
    }

    /// `--block`'s length; 0: none.
    #[inline]
    pub(super) fn block_length(&self) -> Nanos {
        self.block.load(Ordering::Relaxed)
    }

    pub(super) fn max_wait(&self) -> Nanos {
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
}
