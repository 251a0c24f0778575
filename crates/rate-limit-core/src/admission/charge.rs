//! Check-then-charge (`--count-status`): admission only checks the rate
//! bucket (a request is refused when it is empty, and nothing is taken);
//! the plugin charges it when the response's status is listed
//! ([`Limiter::charge`]). Refused requests are never charged, and no
//! request waits for the rate (an empty bucket refuses).
//!
//! A sequential client gets at most `burst + rate·t` charged responses
//! through (the model test below). Requests in flight together all pass the
//! check on one token, and each is charged its full 1/rate
//! (`GcraParams::charge`): the bucket goes below empty by what they cost,
//! and refuses the client until that is repaid, so at most `burst + rate·t`
//! plus the requests in flight at once get through (the second model
//! test). `--limit` with `--key` bounds how many can be in flight.

use limits::{Clock, Waiter};

use super::key_scope::Keyed;
use super::limiter::{Limiter, Scope};

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Makes the rate check-then-charge. Called once, when the limiter is
    /// built and before it decides anything (it is part of its shape).
    pub fn set_charge_on_response(&self) {
        self.on_response
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether responses charge the rate (`--count-status`).
    #[inline]
    pub fn charges_on_response(&self) -> bool {
        self.on_response.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Charges one token to the rule's bucket or `key`'s (a key evicted
    /// since its request is added again, then charged). Peered, the charge
    /// is a hit in the next report, as a request's token is. False if
    /// nothing was charged: no rate, a keyed limiter without a key, or no
    /// room for the key (every key of its shard busy).
    pub(crate) fn charge(&self, key: Option<u64>) -> bool {
        let now = self.clock.now();
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                let (t, Some(p)) = (&scope.table, scope.params()) else {
                    return false;
                };
                // `now` also goes to `sticky` during this call's evictions.
                t.with_evicted_at(
                    k,
                    now,
                    |st| {
                        st.tat = p.charge(st.tat, now);
                        if let Err(wait) = p.check(st.tat, now) {
                            // Locked out: sticky until the debt is repaid.
                            st.lock_until(now.saturating_add(wait));
                        }
                        if scope.peered.is_some() {
                            st.charged(&p);
                        }
                    },
                    |st| scope.carry(t.shard_index(k), st),
                )
                .is_ok()
            }
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => match &rule.bucket {
                Some(b) => {
                    b.charge(now);
                    true
                }
                None => false,
            },
        }
    }
}

impl<W: Waiter> Keyed<W> {
    /// Charges refuse the key until `until` (a box, allocated only for a
    /// key that failures locked out).
    fn lock_until(&mut self, until: limits::Nanos) {
        self.queues().locked_until = until;
    }
}

#[cfg(test)]
mod tests;
