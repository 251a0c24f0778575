//! `--block=SECONDS`, the penalty box: a key refused for its rate (or for
//! `--count-status`) stays refused for SECONDS, even once its bucket has
//! refilled. Without `--key` the whole rule is blocked.
//!
//! While a block holds, a request is refused before its bucket is looked
//! at: no token is taken, and the bucket refills meanwhile, so the client
//! comes back to a full burst. The refusal that starts a block says so
//! (`Refused::BlockStarted`: the plugin logs one line per block, not one
//! per refused request); the others are `Refused::Blocked`. The decisions
//! are `admit/`'s, the commands `control.rs`'s; this file is the state.
//!
//! A key's block is kept in its boxed state, allocated the first time the
//! key needs slots, a queue place or a block (8 bytes more there; the
//! 16 bytes inline per key are unchanged). A blocked key is sticky, not busy: a flood of new keys can
//! evict it (lifting its block) rather than be refused, so blocks cannot
//! lock new clients out of a full table.

use std::sync::atomic::{AtomicU64, Ordering};

use limits::{Nanos, Waiter};

use super::key_scope::Keyed;

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

    /// A rate refusal at `now`, with blocks `length` long: true if it
    /// starts a block (none held). Of requests refused together, one does.
    pub(super) fn start(&self, now: Nanos, length: Nanos) -> bool {
        let until = self.0.load(Ordering::Relaxed);
        until <= now
            && self
                .0
                .compare_exchange(
                    until,
                    now.saturating_add(length),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    pub(super) fn set(&self, until: Nanos) {
        self.0.store(until, Ordering::Relaxed);
    }

    pub(super) fn until(&self, now: Nanos) -> Option<Nanos> {
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

#[cfg(test)]
mod tests;
