//! `--limit=auto`: the rule-wide limit learned from the origin's latency by
//! a `adaptive::Controller` (crates/adaptive: the algorithm, its choice and
//! its simulations). The plugin reports each origin transaction of a slot
//! holder when it closes ([`Limiter::auto_sample`]); a sample that closes
//! the controller's window may move the limit, applied to the slots (a
//! fall at once, a raise by steps of an eighth, one per sample: raising
//! admits waiters inside the call). `set TARGET limit=N`
//! pins it, `limit=auto` lets it learn again ([`Limiter::pin_limit`]).

use std::sync::Arc;

use limits::{Clock, Slots, Waiter};

pub use adaptive::{Outcome, State as AutoState};

use super::bounds::Limits;
use super::limiter::{Limiter, Scope};

/// A learned limit: its controller and the rule's slots it sets, held
/// together so that a sample goes straight to both (no look through the
/// limiter's scope on each of a busy rule's transactions).
pub(super) struct Auto<W: Waiter> {
    pub(super) controller: adaptive::Controller,
    slots: Arc<Slots<W>>,
}

impl<W: Waiter> Auto<W> {
    /// For a limiter with rule-wide slots whose `limits` say `--limit=auto`
    /// (the options refuse it with `--key`).
    pub(super) fn new(limits: &Limits, scope: &Scope<W>) -> Option<Auto<W>> {
        let Scope::Rule(rule) = scope else {
            return None;
        };
        Some(Auto {
            controller: adaptive::Controller::new(limits.auto?.config()?, limits::MonotonicClock),
            slots: rule.slots()?.clone(),
        })
    }
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Whether the limit is learned (`--limit=auto`).
    #[inline]
    pub fn is_auto(&self) -> bool {
        self.auto.is_some()
    }

    /// Whether the next transaction is worth measuring (a busy limiter
    /// measures a share: `adaptive::Controller::wants_sample`); false
    /// unless learned. Ask it of every transaction that held a slot, before
    /// finding out whether it went to the origin.
    #[inline]
    pub fn auto_wants_sample(&self) -> bool {
        self.auto
            .as_ref()
            .is_some_and(|a| a.controller.wants_sample())
    }

    /// One origin transaction of a slot holder ended with `outcome` (a
    /// request that never reached the origin, a cache hit or a refusal, is
    /// no sample). Call it before its slot is given back: the slots held
    /// then are the load it met. Cost: the controller's (an atomic add or
    /// two); once per window, a new limit applied to the slots.
    pub fn auto_sample(&self, outcome: Outcome) {
        if let Some(Auto { controller, slots }) = &self.auto {
            // The count at admission is not kept (the common path stores
            // nothing per request): the close-time count.
            controller.observe(outcome, 0, slots);
        }
    }

    /// Pins the learned limit (`Some(n)`, `set TARGET limit=N`) or lets it
    /// learn again (`None`, `limit=auto`); the limit in force, or `None` on
    /// a limiter whose limit is not learned.
    pub fn pin_limit(&self, limit: Option<u32>) -> Option<u32> {
        let Auto { controller, slots } = self.auto.as_ref()?;
        Some(controller.pin_into(limit, slots))
    }

    /// The controller's state (metrics, `show`); `None` unless learned.
    pub fn auto_state(&self) -> Option<AutoState> {
        self.auto.as_ref().map(|a| a.controller.state())
    }
}

#[cfg(test)]
mod tests;
