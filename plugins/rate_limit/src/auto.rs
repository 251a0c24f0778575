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

use std::sync::{Arc, Weak};
use std::time::Duration;

use ats::sched::Periodic;
use ats::stats::Stat;
use limits::Waiter;
use parking_lot::Mutex;
use rate_limit_core::{metric_name, AutoState, Limiter, Options};

/// A gauge's value in the controller's state.
type Gauge = fn(&AutoState) -> i64;

/// How often the learned limit reaches its gauges.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// One limiter's gauges under one metric name: its publishing tasks, held
/// by the rules that name them (stopped with the last).
pub(crate) struct Gauges {
    _tasks: Vec<Periodic>,
}

/// The live gauges, by limiter and metric name: rules of a group that share
/// a `--tag` (or a reload's new rule and the old one, both alive a while)
/// publish the one limiter's state once, not once each (the gauges are
/// published as deltas, which would add up).
static GAUGES: Mutex<Vec<(GaugesOf, Weak<Gauges>)>> = Mutex::new(Vec::new());

/// A limiter's id and its rule's metric name prefix.
type GaugesOf = (u64, String);

/// Publishes the controller's state as gauges: `limit`, `rtt_baseline_us`
/// and `rtt_recent_us` (0 until measured), every second.
pub(crate) fn publish<W: Waiter>(o: &Options, limiter: &Arc<Limiter<W>>) -> Option<Arc<Gauges>>
where
    Limiter<W>: Send + Sync,
{
    if !limiter.is_auto() {
        return None;
    }
    let id = (limiter.id(), metric_name(&o.prefix, &o.metric_tag, ""));
    let mut all = GAUGES.lock();
    all.retain(|(_, g)| g.strong_count() > 0);
    if let Some(g) = all
        .iter()
        .find(|(k, _)| *k == id)
        .and_then(|(_, g)| g.upgrade())
    {
        return Some(g);
    }
    let gauges: [(&str, Gauge); 3] = [
        ("limit", |s| i64::from(s.limit)),
        ("rtt_baseline_us", |s| us(s.baseline)),
        ("rtt_recent_us", |s| us(s.recent)),
    ];
    let tasks = gauges
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
        .collect();
    let g = Arc::new(Gauges { _tasks: tasks });
    all.push((id, Arc::downgrade(&g)));
    Some(g)
}

fn us(n: Option<u64>) -> i64 {
    n.map_or(0, |n| i64::try_from(n / 1000).unwrap_or(i64::MAX))
}
