//! Admission decisions of one limiter: a rate bucket, concurrency slots with
//! a FIFO queue, a bounded number of queue places and a maximum wait.
//!
//! Pure: inputs in, decisions out, time from an injected [`Clock`]. The
//! plugin maps the decisions to hooks and timers; nothing here knows about
//! transactions. Resources given out are guards that give themselves back:
//! a [`Permit`] frees its slot, a [`BudgetToken`] its queue place, and a
//! [`RateToken`] returns its rate token unless the request was served.

use std::sync::Arc;

use limits::{
    Budget, BudgetToken, Clock, Gcra, MonotonicClock, Nanos, Permit, Quota, Reservation, Slots,
    Ticket, Waiter,
};

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

/// One limiter's state. Shared (`Arc`) by the requests it admits.
pub struct Limiter<W: Waiter, C: Clock = MonotonicClock> {
    slots: Option<Arc<Slots<W>>>,
    bucket: Option<Gcra>,
    budget: Arc<Budget>,
    maxage: Option<Nanos>,
    clock: C,
}

/// The decision for a new request.
pub enum Admission<W: Waiter, C: Clock = MonotonicClock> {
    /// Go on now, holding a slot if the limiter has a concurrency limit.
    Go(Option<Permit<W>>),
    /// Wait: first `rate_delay` for the rate bucket, then for a slot.
    Wait(Wait<W, C>),
    /// Refused at once (over the rate or the limit, and no queue place or
    /// not within `maxage`). Nothing was taken.
    Reject,
}

/// A decided wait: its queue place, when it started, and the rate token it
/// reserved (given back if the request is not served).
pub struct Wait<W: Waiter, C: Clock = MonotonicClock> {
    pub place: BudgetToken,
    pub since: Nanos,
    pub rate_delay: Nanos,
    pub rate: Option<RateToken<W, C>>,
}

/// A rate token taken for a request that has not been served yet. Dropping
/// it gives the token back; [`RateToken::spend`] keeps it taken.
#[must_use = "dropping the token gives it back to the bucket"]
pub struct RateToken<W: Waiter, C: Clock = MonotonicClock> {
    limiter: Option<Arc<Limiter<W, C>>>,
}

impl<W: Waiter, C: Clock> RateToken<W, C> {
    /// The request was served: the token stays taken.
    pub fn spend(mut self) {
        self.limiter = None;
    }
}

impl<W: Waiter, C: Clock> Drop for RateToken<W, C> {
    fn drop(&mut self) {
        if let Some(l) = self.limiter.take() {
            l.refund_rate();
        }
    }
}

fn spend<W: Waiter, C: Clock>(token: Option<RateToken<W, C>>) {
    if let Some(t) = token {
        t.spend();
    }
}

/// What happens to a request once its rate wait is over.
pub enum SlotWait<W: Waiter> {
    /// No concurrency limit: go on.
    Go(W),
    /// Already waited `maxage`: refuse it.
    Expired(W),
    /// In the FIFO, or already admitted inside the call (then the ticket is
    /// no longer waiting). `expires_in`: time left until `maxage`.
    Queued {
        ticket: Ticket<W>,
        expires_in: Option<Nanos>,
    },
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    pub fn new(limits: Limits, clock: C) -> Arc<Self> {
        Arc::new(Limiter {
            slots: limits.limit.map(Slots::new),
            bucket: limits.rate.map(|(r, b)| Gcra::per_second(r, b)),
            budget: Budget::new(limits.queue),
            maxage: limits.maxage,
            clock,
        })
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    pub fn slots(&self) -> Option<&Arc<Slots<W>>> {
        self.slots.as_ref()
    }

    pub fn has_rate(&self) -> bool {
        self.bucket.is_some()
    }

    /// Requests waiting right now (for the rate or a slot).
    pub fn queued(&self) -> u32 {
        self.budget.used()
    }

    /// Slots left, and the rate quota, for `RateLimit` response fields.
    pub fn remaining(&self) -> (Option<u32>, Option<Quota>) {
        let left = self
            .slots
            .as_ref()
            .map(|s| s.limit().saturating_sub(s.active()));
        let quota = self.bucket.as_ref().map(|b| b.quota(self.clock.now()));
        (left, quota)
    }

    fn refund_rate(&self) {
        if let Some(b) = &self.bucket {
            b.refund(self.clock.now());
        }
    }

    fn rate_token(self: &Arc<Self>) -> Option<RateToken<W, C>> {
        self.bucket.as_ref().map(|_| RateToken {
            limiter: Some(self.clone()),
        })
    }

    /// Decides a new request: the rate bucket first, then a slot.
    pub fn admit(self: &Arc<Self>) -> Admission<W, C> {
        let now = self.clock.now();
        let mut place = None;
        if let Some(bucket) = &self.bucket {
            if let Reservation::Denied(wait) = bucket.reserve(now, None) {
                // Over the rate: wait if a queue place is free and maxage allows the wait.
                let max_wait = self.maxage.unwrap_or(Nanos::MAX);
                if wait > max_wait {
                    return Admission::Reject;
                }
                let Some(p) = self.budget.try_take() else {
                    return Admission::Reject;
                };
                match bucket.reserve(now, Some(max_wait)) {
                    Reservation::Now => place = Some(p),
                    Reservation::After(delay) => {
                        return Admission::Wait(Wait {
                            place: p,
                            since: now,
                            rate_delay: delay,
                            rate: self.rate_token(),
                        });
                    }
                    Reservation::Denied(_) => return Admission::Reject,
                }
            }
        }
        // From here a rate token (if any) is taken for this request.
        let rate = self.rate_token();
        let Some(slots) = &self.slots else {
            spend(rate);
            return Admission::Go(None);
        };
        if let Some(permit) = slots.try_acquire() {
            spend(rate);
            return Admission::Go(Some(permit));
        }
        match place.or_else(|| self.budget.try_take()) {
            Some(place) => Admission::Wait(Wait {
                place,
                since: now,
                rate_delay: 0,
                rate,
            }),
            // Dropping `rate` gives the token back: nothing was taken.
            None => Admission::Reject,
        }
    }

    /// After the rate wait of a request that started waiting at `since`:
    /// expire it, let it go, or queue it for a slot.
    pub fn wait_for_slot(&self, since: Nanos, waiter: W) -> SlotWait<W> {
        let Some(slots) = &self.slots else {
            return SlotWait::Go(waiter);
        };
        let now = self.clock.now();
        let deadline = self.maxage.map(|m| since.saturating_add(m));
        if deadline.is_some_and(|d| d <= now) {
            return SlotWait::Expired(waiter);
        }
        SlotWait::Queued {
            ticket: slots.enqueue(waiter),
            expires_in: deadline.map(|d| d - now),
        }
    }

    /// Takes out of the queue the first `max` waiters (oldest first) for
    /// which `gone` is true: clients that left. `gone` may be slow.
    pub fn remove_departed(&self, max: usize, mut gone: impl FnMut(&W) -> bool) -> Vec<W> {
        let Some(slots) = &self.slots else {
            return Vec::new();
        };
        let mut checked = 0;
        slots.remove_waiting(|w| {
            checked += 1;
            checked <= max && gone(w)
        })
    }
}

#[cfg(test)]
mod tests;
