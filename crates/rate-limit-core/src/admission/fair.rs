//! A rule limiter whose slots are shared fairly between flows (`--fair`):
//! the rule scope's [`Slots`] in fair mode, with flow keys hashed here. The
//! request's flow travels as the `flow` of [`Limiter::admit_flow`] and the
//! `key` of [`Limiter::wait_for_slot`] (a fair limiter is never keyed).

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use limits::{Clock, FairStats, Slots, Waiter};

use super::bounds::Limits;
use super::limiter::{Limiter, Scope};
use super::rule_scope::{RuleScope, RuleSlots};
use crate::fair::FairOptions;

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// A limiter whose `limits.limit` slots are shared between flows as
    /// `fair` says. Without a concurrency limit it is a plain one (the
    /// options refuse `--fair` without `--limit`).
    pub fn fair(limits: Limits, fair: &FairOptions, clock: C) -> Arc<Self> {
        let mut rule = RuleScope::plain(limits);
        if let Some(l) = limits.limit {
            let seed = RandomState::new();
            let slots = Slots::fair(l, fair.config(|k| seed.hash_one(k)));
            // One flow waits in at most its part of the places.
            slots.set_flow_queue(limits.queue);
            rule.slots = RuleSlots::Fair { slots, seed };
        }
        Arc::new(Limiter::with_scope(limits, clock, Scope::Rule(rule)))
    }

    /// The fair slots and their flows' seed, if this limiter is fair.
    fn fair_slots(&self) -> Option<(&Arc<Slots<W>>, &RandomState)> {
        match &self.scope {
            Scope::Rule(RuleScope {
                slots: RuleSlots::Fair { slots, seed },
                ..
            }) => Some((slots, seed)),
            _ => None,
        }
    }

    /// The flow of a request whose flow source gave `bytes` (the same bytes
    /// as the weights file's entries). 0 on a limiter that is not fair,
    /// which has no flows ([`Limiter::admit_flow`] ignores it).
    pub(crate) fn flow_key(&self, bytes: &[u8]) -> u64 {
        self.fair_slots()
            .map_or(0, |(_, seed)| seed.hash_one(bytes))
    }

    /// Applies changed `--flow-…` options (or weights file) to the live
    /// limiter; a no-op on a limiter that is not fair.
    pub fn set_fair(&self, fair: &FairOptions) {
        if let Some((s, seed)) = self.fair_slots() {
            s.set_fair(fair.config(|k| seed.hash_one(k)));
        }
    }

    /// Counters of a fair limiter; `None` otherwise.
    pub fn fair_stats(&self) -> Option<FairStats> {
        let (s, _) = self.fair_slots()?;
        Some(s.fair_stats())
    }
}

#[cfg(test)]
mod tests;
