//! `--limit=auto`: the rule-wide limit learned from the origin's latency by
//! a `adaptive::Controller` (crates/adaptive: the algorithm, its choice and
//! its simulations). The plugin reports each origin transaction of a slot
//! holder when it closes ([`Limiter::auto_sample`]); a sample that closes
//! the controller's window may move the limit, applied to the slots (a
//! fall at once, a raise by steps of an eighth, one per sample: raising
//! admits waiters inside the call). `set TARGET limit=N`
//! pins it, `limit=auto` lets it learn again ([`Limiter::pin_limit`]).

use limits::{Clock, Waiter};

pub use adaptive::{Outcome, State as AutoState};

use super::limiter::{Limiter, Scope};

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Whether the limit is learned (`--limit=auto`).
    #[inline]
    pub fn is_auto(&self) -> bool {
        self.auto.is_some()
    }

    /// Whether the next transaction is worth measuring (a busy limiter
    /// measures a share: `adaptive::Controller::wants_sample`); false
    /// unless learned.
    #[inline]
    pub fn auto_wants_sample(&self) -> bool {
        self.auto
            .as_ref()
            .is_some_and(adaptive::Controller::wants_sample)
    }

    /// One origin transaction of a slot holder ended with `outcome` (a
    /// request that never reached the origin, a cache hit or a refusal, is
    /// no sample). Call it before its slot is given back: the slots held
    /// then are the load it met. Cost: the controller's (an atomic add or
    /// two); once per window, a new limit applied to the slots.
    pub fn auto_sample(&self, outcome: Outcome) {
        if let (Some(c), Scope::Rule(rule)) = (&self.auto, &self.scope) {
            if let Some(slots) = rule.slots() {
                // The count at admission is not kept (the common path
                // stores nothing per request): the close-time count.
                c.observe(outcome, 0, slots);
            }
        }
    }

    /// Pins the learned limit (`Some(n)`, `set TARGET limit=N`) or lets it
    /// learn again (`None`, `limit=auto`); the limit in force, or `None` on
    /// a limiter whose limit is not learned.
    pub fn pin_limit(&self, limit: Option<u32>) -> Option<u32> {
        let (Some(c), Scope::Rule(rule)) = (&self.auto, &self.scope) else {
            return None;
        };
        Some(match rule.slots() {
            Some(slots) => c.pin_into(limit, slots),
            None => c.pin(limit),
        })
    }

    /// The controller's state (metrics, `show`); `None` unless learned.
    pub fn auto_state(&self) -> Option<AutoState> {
        self.auto.as_ref().map(adaptive::Controller::state)
    }
}

#[cfg(test)]
mod tests;
