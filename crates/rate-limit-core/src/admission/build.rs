//! A rule's limiter from its options: the shape they ask for.

use std::sync::Arc;

use limits::{Clock, Waiter};

use super::bounds::Limits;
use super::limiter::Limiter;
use crate::store::ledger::MAX_KEYS_PER_SYNC;
use crate::Options;

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// The limiter `o` describes (the registry makes one when no live one
    /// fits): fair, peered (`--peers`, or `--store-sync`, which exchanges
    /// counts as peers do), keyed or the rule's own; with `--count-status`
    /// it charges responses.
    pub fn for_options(o: &Options, clock: C) -> Arc<Self> {
        let limits = Limits::of(o);
        let sync = o.store.as_ref().is_some_and(|s| s.sync_ms.is_some());
        let limiter = match (&o.fair, &o.key) {
            (Some(f), _) => Limiter::fair(limits, f, clock),
            (None, Some(_)) if o.peer.is_some() || sync => {
                let report_tags = o.peer.as_ref().map_or(MAX_KEYS_PER_SYNC, |p| p.max_tags);
                Limiter::peered(limits, o.keys, report_tags, clock)
            }
            (None, Some(_)) => Limiter::keyed(limits, o.keys, clock),
            (None, None) => Limiter::new(limits, clock),
        };
        if o.count_status.is_some() {
            limiter.set_charge_on_response();
        }
        limiter
    }
}

#[cfg(test)]
mod tests;
