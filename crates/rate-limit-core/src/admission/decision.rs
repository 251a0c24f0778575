//! What a decision hands back: [`Admission`] for a new request, [`SlotWait`]
//! after its rate wait, and the [`RateToken`] that gives a reserved rate
//! token back unless the request is served.

use std::sync::Arc;

use limits::{BudgetToken, Clock, MonotonicClock, Nanos, Permit, Ticket, Waiter};

use super::limiter::{Limiter, Scope};

/// The decision for a new request.
pub enum Admission<W: Waiter, C: Clock = MonotonicClock> {
    /// Go on now, holding a slot if the limiter has a concurrency limit.
    Go(Option<Permit<W>>),
    /// Wait: first `rate_delay` for the rate bucket, then for a slot.
    Wait(Wait<W, C>),
    /// Refused at once (over the rate or the limit, and no queue place or
    /// not within `maxage`). Nothing was taken.
    Reject(Refused),
}

/// Why [`Admission::Reject`] refused (for the refusal log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over the rate, and it could not wait for it (no queue place, or the
    /// wait would pass `maxage`).
    Rate,
    /// At the concurrency limit and no queue place left.
    QueueFull,
    /// Keyed: every key held is busy, so the client's key has no state.
    KeyTableFull,
    /// `--fair --flow-over=reject`: its flow holds its share.
    FlowOver,
    /// Keyed, and the request has no key (the plugin applies
    /// `--key-missing` before asking, so it never sees this).
    KeyMissing,
    /// `--block`: over the rate, and this refusal starts a block of its
    /// key (or of the rule).
    BlockStarted,
    /// `--block`: its key (or the rule) is blocked; the bucket was not
    /// touched.
    Blocked,
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
    key: Option<u64>,
}

impl<W: Waiter, C: Clock> RateToken<W, C> {
    /// The request was served: the token stays taken.
    pub fn spend(mut self) {
        self.limiter = None;
    }

    /// The key the token was taken from (`None`: the rule's bucket).
    pub(super) fn key(&self) -> Option<u64> {
        self.key
    }
}

impl<W: Waiter, C: Clock> Drop for RateToken<W, C> {
    fn drop(&mut self) {
        if let Some(l) = self.limiter.take() {
            l.refund_rate(self.key);
        }
    }
}

/// What happens to a request once its rate wait is over.
pub enum SlotWait<W: Waiter> {
    /// No concurrency limit: go on.
    Go(W),
    /// Already waited `maxage`: refuse it.
    Expired(W),
    /// Refused as it joins its flow's queue (fair limiter): the flow is at
    /// its share with `--flow-over=reject` (counted in `flow_rejected`), or
    /// already has its part of the queue places waiting (a queue-full
    /// refusal). Its rate token and place are given back with the request.
    Refused(W),
    /// In the FIFO, or already admitted inside the call (then the ticket is
    /// no longer waiting). `expires_in`: time left until `maxage`.
    Queued {
        ticket: Ticket<W>,
        expires_in: Option<Nanos>,
    },
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    pub(super) fn refund_rate(&self, key: Option<u64>) {
        if self.charges_on_response() {
            // Checked, not taken: nothing to give back.
            return;
        }
        let now = self.clock.now();
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                if let Some(p) = scope.params() {
                    // A key evicted meanwhile was reset to full: nothing to give back.
                    let _ = scope.table.get(k, |st| {
                        st.tat = p.refund(st.tat, now);
                        st.unhit();
                    });
                }
            }
            (Scope::Keyed(_), None) => {}
            (Scope::Rule(rule), _) => {
                if let Some(b) = &rule.bucket {
                    b.refund(now);
                }
            }
        }
    }

    pub(super) fn rate_token(self: &Arc<Self>, key: Option<u64>) -> Option<RateToken<W, C>> {
        let has_rate = match &self.scope {
            Scope::Rule(rule) => rule.bucket.is_some(),
            Scope::Keyed(scope) => scope.params().is_some(),
        };
        let rated = has_rate && !self.charges_on_response();
        rated.then(|| RateToken {
            limiter: Some(self.clone()),
            key,
        })
    }
}
