//! A new request's decision in the rule scope: the rule's bucket, then its
//! slots (a fair limiter's: within the flow's share), then a queue place.

use std::sync::Arc;

use limits::{Clock, FlowTry, Reservation, Waiter};

use crate::admission::decision::{Admission, Refused, Wait};
use crate::admission::limiter::Limiter;
use crate::admission::rule_scope::{RuleScope, RuleSlots};

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
            if rule.block.holds(now) {
                // Refused before the bucket is looked at (block.rs).
                return Admission::Reject(Refused::Blocked);
            }
            // Over the rate: a refusal, which may start a block.
            let over = || {
                let length = self.block_length();
                Admission::Reject(if length == 0 {
                    Refused::Rate
                } else if rule.block.start(now, length) {
                    Refused::BlockStarted
                } else {
                    Refused::Blocked
                })
            };
            if self.charges_on_response() {
                // Checked only; the response charges it (no rate wait).
                if bucket.check(now).is_err() {
                    return over();
                }
            } else if let Reservation::Denied(wait) = bucket.reserve(now, None) {
                // Over the rate: wait if a queue place is free and maxage allows the wait.
                let max_wait = self.max_wait();
                if wait > max_wait {
                    return over();
                }
                let Some(p) = rule.budget.try_take() else {
                    return over();
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
                    Reservation::Denied(_) => return over(),
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
