//! The rule scope: one bucket, one set of slots (plain or shared fairly
//! between flows) and one queue budget for every request of the rule. Its
//! state only; a request's decision in it is `admit/rule.rs`.

use std::hash::RandomState;
use std::sync::Arc;

use limits::{Budget, Gcra, GcraParams, Slots, Waiter};

use super::block::Block;
use super::bounds::Limits;

/// The state of a rule-scoped limiter.
pub(super) struct RuleScope<W: Waiter> {
    pub(super) bucket: Option<Gcra>,
    pub(super) slots: RuleSlots<W>,
    /// Places for requests waiting (for the rate or a slot).
    pub(super) budget: Arc<Budget>,
    /// `--block` without `--key`: the whole rule's.
    pub(super) block: Block,
}

/// The rule's concurrency limit, if any.
pub(super) enum RuleSlots<W: Waiter> {
    /// No `--limit`.
    None,
    /// One FIFO for every request.
    Plain(Arc<Slots<W>>),
    /// `--fair`: the slots are shared between flows, whose keys `seed`
    /// hashes (secret per limiter, so clients cannot aim at one another's
    /// flows; see `fair.rs`).
    Fair {
        slots: Arc<Slots<W>>,
        seed: RandomState,
    },
}

impl<W: Waiter> RuleScope<W> {
    /// The rule scope of `limits`, its slots plain.
    pub(super) fn plain(limits: Limits) -> Self {
        RuleScope {
            bucket: limits.rate.map(|(r, b)| Gcra::per_second(r, b)),
            slots: limits
                .limit
                .map_or(RuleSlots::None, |l| RuleSlots::Plain(Slots::new(l))),
            budget: Budget::new(limits.queue),
            block: Block::new(),
        }
    }

    pub(super) fn slots(&self) -> Option<&Arc<Slots<W>>> {
        match &self.slots {
            RuleSlots::None => None,
            RuleSlots::Plain(s) | RuleSlots::Fair { slots: s, .. } => Some(s),
        }
    }

    pub(super) fn reconfigure(&self, params: Option<GcraParams>, limit: u32, queue: u32) {
        if let (Some(b), Some(p)) = (&self.bucket, params) {
            b.set_params(p);
        }
        self.budget.set_max(queue);
        if let Some(s) = self.slots() {
            s.set_flow_queue(queue);
            s.set_limit(limit);
        }
    }
}
