//! `--limit=auto` in the plugin: each origin transaction that held one of
//! the rule's slots tells the limiter's controller how long the origin took
//! (rate_limit_core's `Limiter::auto_sample`), at its TXN_CLOSE, before its
//! slot is given back; and the learned limit, baseline and recent RTT are
//! published as gauges every second.
//!
//! A request that keeps only its slot is sampled by the rule's slot-release
//! hook (`state.rs`); one that keeps more (a wait, RateLimit fields) by the
//! rule's sampler hook ([`Sampler`]), added where its slot is stored.

use std::sync::Arc;
use std::time::Duration;

use ats::sched::Periodic;
use ats::stats::Stat;
use ats::{CloseHandler, OriginReply, Txn};
use rate_limit_core::{metric_name, AutoState, Limiter, Options, Outcome};

use crate::queue::Queued;

/// Tells the controller what the origin did for `txn` (nothing for a
/// request that never reached it: a cache hit teaches nothing). A 5xx or
/// no answer is a failure, never an RTT: a fast error is no spare capacity.
pub(crate) fn sample(limiter: &Limiter<Queued>, txn: Txn<'_>) {
    let outcome = match txn.origin_reply() {
        None => return,
        Some(OriginReply::Answered { rtt, status }) if status < 500 => {
            Outcome::Answered(u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX))
        }
        Some(_) => Outcome::Failed,
    };
    limiter.auto_sample(outcome);
}

/// The TXN_CLOSE hook of an auto rule's requests whose slot is in their
/// state (not the slot-release hook's): samples them.
pub(crate) struct Sampler {
    limiter: Arc<Limiter<Queued>>,
}

impl Sampler {
    pub(crate) fn new(limiter: Arc<Limiter<Queued>>) -> Sampler {
        Sampler { limiter }
    }
}

impl CloseHandler for Sampler {
    fn closed(&self, txn: Txn<'_>) {
        sample(&self.limiter, txn);
    }
}

/// A gauge's value in the controller's state.
type Gauge = fn(&AutoState) -> i64;

/// How often the learned limit reaches its gauges.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Publishes the controller's state as gauges: `limit`, `rtt_baseline_us`
/// and `rtt_recent_us` (0 until measured), as deltas (rules of a group
/// share the names). The tasks stop with the rule.
pub(crate) fn publish(o: &Options, limiter: &Arc<Limiter<Queued>>) -> Vec<Periodic> {
    if !limiter.is_auto() {
        return Vec::new();
    }
    let gauges: [(&str, Gauge); 3] = [
        ("limit", |s| i64::from(s.limit)),
        ("rtt_baseline_us", |s| us(s.baseline)),
        ("rtt_recent_us", |s| us(s.recent)),
    ];
    gauges
        .into_iter()
        .filter_map(|(name, value)| {
            let stat = Stat::find_or_create(&metric_name(&o.prefix, &o.metric_tag, name))
                .map_err(|e| log::error!("{e}"))
                .ok()?;
            let l = Arc::downgrade(limiter);
            let read = move || l.upgrade()?.auto_state().map(|s| (value(&s), 0));
            ats::stats::publish_deltas(PUBLISH_EVERY, Some(stat), None, read)
                .map_err(|e| log::error!("--limit=auto: cannot start the {name} metric: {e}"))
                .ok()
        })
        .collect()
}

fn us(n: Option<u64>) -> i64 {
    n.map_or(0, |n| i64::try_from(n / 1000).unwrap_or(i64::MAX))
}
