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
    /// rule would, and with `--block` starts the block it would
    /// (`BlockStarted`; a peered key's is not reported: a dry run tells
    /// its peers nothing).
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
            let key = token.key();
            // Dropping the token gives it back.
            drop(token);
            return Err(self.dry_block(key));
        }
        token.spend();
        Ok(())
    }

    /// The live refusal `Rate` would start a block (`--block`).
    fn dry_block(&self, key: Option<u64>) -> Refused {
        let length = self.block_length();
        if length == 0 {
            return Refused::Rate;
        }
        let now = self.clock.now();
        let until = now.saturating_add(length);
        let started = match (&self.scope, key) {
            (Scope::Keyed(k), Some(key)) => k
                .table
                .get(key, |st| {
                    let held = st.blocked(now);
                    if !held {
                        st.block_until(until);
                    }
                    !held
                })
                .unwrap_or(false),
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(r), _) => r.block.start(now, length),
        };
        if started {
            Refused::BlockStarted
        } else {
            Refused::Rate
        }
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
