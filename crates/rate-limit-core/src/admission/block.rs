//! `--block=SECONDS`, the penalty box: a key refused for its rate (or for
//! `--count-status`) stays refused for SECONDS, even once its bucket has
//! refilled. Without `--key` the whole rule is blocked.
//!
//! While a block holds, a request is refused before its bucket is looked
//! at: no token is taken, and the bucket refills meanwhile, so the client
//! comes back to a full burst. The refusal that starts a block says so
//! ([`Refused::BlockStarted`]: the plugin logs one line per block, not one
//! per refused request); the others are [`Refused::Blocked`].
//!
//! A key's block is kept in its boxed state (allocated only for keys that
//! need one: a blocked key costs 8 bytes more there, and nothing for the
//! others). A blocked key is sticky, not busy: a flood of new keys can
//! evict it (lifting its block) rather than be refused, so blocks cannot
//! lock new clients out of a full table.

use std::sync::atomic::{AtomicU64, Ordering};

use limits::{Clock, Nanos, Waiter};

use super::decision::Refused;
use super::key_scope::Keyed;
use super::limiter::{Limiter, Scope};

/// The rule-wide block: until when every request is refused (0: none).
pub(super) struct Block(AtomicU64);

impl Block {
    pub(super) const fn new() -> Block {
        Block(AtomicU64::new(0))
    }

    #[inline]
    pub(super) fn holds(&self, now: Nanos) -> bool {
        self.0.load(Ordering::Relaxed) > now
    }

    /// A rate refusal at `now` with a block of `length` (0: none): starts
    /// a block unless one holds. Of requests refused together, one starts it.
    pub(super) fn refuse(&self, now: Nanos, length: Nanos) -> Refused {
        if length == 0 {
            return Refused::Rate;
        }
        let until = self.0.load(Ordering::Relaxed);
        if until > now {
            return Refused::Blocked;
        }
        match self.0.compare_exchange(
            until,
            now.saturating_add(length),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => Refused::BlockStarted,
            Err(_) => Refused::Blocked,
        }
    }

    fn set(&self, until: Nanos) {
        self.0.store(until, Ordering::Relaxed);
    }

    fn until(&self, now: Nanos) -> Option<Nanos> {
        let until = self.0.load(Ordering::Relaxed);
        (until > now).then_some(until)
    }
}

impl<W: Waiter> Keyed<W> {
    #[inline]
    pub(super) fn blocked(&self, now: Nanos) -> bool {
        self.queues.as_ref().is_some_and(|q| q.blocked_until > now)
    }

    /// Blocks the key until `until` (0: lifts it).
    pub(super) fn block_until(&mut self, until: Nanos) {
        if until == 0 && self.queues.is_none() {
            return;
        }
        self.queues().blocked_until = until;
    }

    pub(super) fn block_ends(&self, now: Nanos) -> Option<Nanos> {
        let until = self.queues.as_ref()?.blocked_until;
        (until > now).then_some(until)
    }
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// `--block`'s length; 0: none.
    #[inline]
    pub(super) fn block_length(&self) -> Nanos {
        self.block.load(Ordering::Relaxed)
    }

    /// Blocks `key` (or, on a rule-scoped limiter, the rule) for `length`
    /// from now, whether or not it is over its rate (`block TARGET KEY
    /// SECONDS`); a key not held yet is added. False if there was no room
    /// for the key (every key of its shard busy).
    pub fn block(&self, key: Option<u64>, length: Nanos) -> bool {
        let now = self.clock.now();
        let until = now.saturating_add(length);
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                let t = &scope.table;
                t.with_evicted_at(
                    k,
                    now,
                    |st| st.block_until(until),
                    |st| scope.carry(t.shard_index(k), st),
                )
                .is_ok()
            }
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => {
                rule.block.set(until);
                true
            }
        }
    }

    /// Lifts the block of `key` (or of the rule): true if one held.
    pub fn unblock(&self, key: Option<u64>) -> bool {
        let now = self.clock.now();
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => scope
                .table
                .get(k, |st| {
                    let held = st.blocked(now);
                    st.block_until(0);
                    held
                })
                .unwrap_or(false),
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => {
                let held = rule.block.holds(now);
                rule.block.set(0);
                held
            }
        }
    }

    /// How long the block of `key` (or of the rule) still holds, if one does.
    pub fn blocked_for(&self, key: Option<u64>) -> Option<Nanos> {
        let now = self.clock.now();
        let until = match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => scope.table.get(k, |st| st.block_ends(now))?,
            (Scope::Keyed(_), None) => None,
            (Scope::Rule(rule), _) => rule.block.until(now),
        }?;
        Some(until - now)
    }
}

#[cfg(test)]
mod tests;
