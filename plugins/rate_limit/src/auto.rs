//! `--limit=auto` in the plugin: each origin transaction that held one of
//! the rule's slots tells the limiter's controller how long the origin took
//! (rate_limit_core's `Limiter::auto_sample`), at its TXN_CLOSE, before its
//! slot is given back; and the learned limit, baseline and recent RTT are
//! published as gauges every second.
//!
//! The sampling is `state.rs`'s, beside the slots it watches: a request
//! that keeps only its slot is sampled by the rule's slot-release hook, one
//! that keeps more (a wait, RateLimit fields) by the rule's `Sampler` hook,
//! added before its state's own. Here: the gauges.

use std::sync::Arc;
use std::time::Duration;

use ats::stats::{shared_gauges, Gauge, SharedGauges};
use limits::Waiter;
use rate_limit_core::{metric_name, AutoState, Limiter, Options};

/// How often the learned limit reaches its gauges.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Publishes the controller's state as gauges (`AutoState::GAUGES`:
/// `limit`, `rtt_baseline_us`, `rtt_recent_us`) every second, once per
/// limiter and metric name: rules of a group that share a `--tag`, or a
/// reload's new rule and the old one, publish the one limiter's state once.
pub(crate) fn publish<W: Waiter>(
    o: &Options,
    limiter: &Arc<Limiter<W>>,
) -> Option<Arc<SharedGauges>>
where
    Limiter<W>: Send + Sync + 'static,
{
    if !limiter.is_auto() {
        return None;
    }
    let gauges = (0..AutoState::GAUGES.len())
        .map(|i| -> Gauge<Limiter<W>> {
            (
                metric_name(&o.prefix, &o.metric_tag, AutoState::GAUGES[i]),
                Box::new(move |l| l.auto_state().map(|s| s.gauges()[i])),
            )
        })
        .collect();
    Some(shared_gauges(limiter, gauges, PUBLISH_EVERY))
}
