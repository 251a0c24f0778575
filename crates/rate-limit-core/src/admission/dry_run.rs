//! A dry run's rate waits: nothing waits, so nothing holds a queue place,
//! and the queue never fills. Settled here as if it were there.

use limits::{Clock, Waiter};

use super::decision::{Refused, Wait};
use super::limiter::{Limiter, Scope};

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Dry run: settles a decided wait without waiting. A rate wait longer
    /// than `maxage` or than the queue's places × the rate interval would
    /// have found the live queue full (a GCRA's outstanding waiters are
    /// `(tat − now − τ) / interval`): `Err(Rate)`, and its token goes back,
    /// so a dry run runs up no debt the live rule would not. Otherwise its
    /// token is spent, as the wait would have. The queue place is dropped
    /// either way. For rate-only rules this refuses exactly what the live
    /// rule would.
    pub fn settle_dry_wait(&self, wait: Wait<W, C>) -> Result<(), Refused> {
        let Wait {
            place,
            rate_delay,
            rate,
            ..
        } = wait;
        drop(place);
        let Some(token) = rate else {
            return Ok(());
        };
        if rate_delay > 0 && rate_delay > self.dry_wait_bound() {
            // Dropping the token gives it back.
            drop(token);
            return Err(Refused::Rate);
        }
        token.spend();
        Ok(())
    }

    /// min(maxage, queue places × rate interval), in the request's scope.
    fn dry_wait_bound(&self) -> limits::Nanos {
        let (places, interval) = match &self.scope {
            Scope::Keyed(k) => (k.queue(), k.params().map_or(0, |p| p.interval())),
            Scope::Rule(r) => (
                r.budget.max(),
                r.bucket.as_ref().map_or(0, |b| b.interval()),
            ),
        };
        interval
            .saturating_mul(u64::from(places))
            .min(self.max_wait())
    }
}

#[cfg(test)]
mod tests;
