//! The rule scope: one bucket, one set of slots (plain or shared fairly
//! between flows) and one queue budget for every request of the rule.

use std::hash::RandomState;
use std::sync::Arc;

use limits::{Budget, Clock, FlowTry, Gcra, GcraParams, Reservation, Slots, Waiter};

use super::{Admission, Limiter, Limits, Refused, Wait};

/// The state of a rule-scoped limiter.
pub(super) struct RuleScope<W: Waiter> {
    pub(super) bucket: Option<Gcra>,
    pub(super) slots: RuleSlots<W>,
    /// Places for requests waiting (for the rate or a slot).
    pub(super) budget: Arc<Budget>,
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

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// `flow`: the request's flow on a fair limiter (`--fair`), else ignored.
    pub(super) fn admit_in_rule(
        self: &Arc<Self>,
        rule: &RuleScope<W>,
        flow: u64,
    ) -> Admission<W, C> {
        // The clock is read only when needed: a slot-only admission has no use for it.
        let mut now = None;
        let mut place = None;
        if let Some(bucket) = &rule.bucket {
            let now = *now.insert(self.clock.now());
            if self.charges_on_response() {
                // Checked only; the response charges it (no rate wait).
                if bucket.check(now).is_err() {
                    return Admission::Reject(Refused::Rate);
                }
            } else if let Reservation::Denied(wait) = bucket.reserve(now, None) {
                // Over the rate: wait if a queue place is free and maxage allows the wait.
                let max_wait = self.max_wait();
                if wait > max_wait {
                    return Admission::Reject(Refused::Rate);
                }
                let Some(p) = rule.budget.try_take() else {
                    return Admission::Reject(Refused::Rate);
                };
                match bucket.reserve(now, Some(max_wait)) {
                    Reservation::Now => place = Some(p),
                    Reservation::After(delay) => {
                        return Admission::Wait(Wait {
                            place: p,
                            since: now,
                            rate_delay: delay,
                            rate: self.rate_token(None),
                        });
                    }
                    Reservation::Denied(_) => return Admission::Reject(Refused::Rate),
                }
            }
        }
        // From here a rate token (if any) is taken for this request; it
        // becomes a `RateToken` only if the request waits.
        match &rule.slots {
            RuleSlots::None => return Admission::Go(None),
            RuleSlots::Fair { slots, .. } => match slots.try_acquire_flow(flow) {
                FlowTry::Go(permit) => return Admission::Go(Some(permit)),
                FlowTry::Over => {
                    // Refused at once: the token goes back (and the place).
                    self.refund_rate(None);
                    return Admission::Reject(Refused::FlowOver);
                }
                FlowTry::Wait => {}
            },
            RuleSlots::Plain(slots) => {
                if let Some(permit) = slots.try_acquire() {
                    return Admission::Go(Some(permit));
                }
            }
        }
        match place.or_else(|| rule.budget.try_take()) {
            Some(place) => Admission::Wait(Wait {
                place,
                since: now.unwrap_or_else(|| self.clock.now()),
                rate_delay: 0,
                rate: self.rate_token(None),
            }),
            None => {
                // Nothing taken after all: the token goes back.
                self.refund_rate(None);
                Admission::Reject(Refused::QueueFull)
            }
        }
    }
}
