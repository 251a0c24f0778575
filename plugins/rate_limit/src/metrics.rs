//! A rule's metrics (`Metrics`), its `active` and `admitted` counts kept
//! apart from them (`Live`), and the tasks that publish its key table's and
//! fair limiter's counts; all published every second.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use ats::sched::Periodic;
use ats::stats::Stat;
use limits::{FairStats, Waiter};
use rate_limit_core::{metric_name, Limiter, Options};

/// A rule's metrics; one that could not be created is skipped (and logged).
#[derive(Clone, Copy)]
pub(crate) struct Metrics {
    pub(crate) queued: Option<Stat>,
    pub(crate) rejected: Option<Stat>,
    pub(crate) expired: Option<Stat>,
    pub(crate) resumed: Option<Stat>,
    pub(crate) admitted: Option<Stat>,
    pub(crate) abandoned: Option<Stat>,
    pub(crate) active: Option<Stat>,
    pub(crate) waiting: Option<Stat>,
    /// With `--key`: keys held (gauge) and keys evicted (counter).
    pub(crate) keys: Option<Stat>,
    pub(crate) evicted: Option<Stat>,
    /// With `--count-status`: responses that charged the rate.
    pub(crate) status_charged: Option<Stat>,
    /// With `--fair`: flows holding or waiting (gauge), slots borrowed and
    /// requests refused over their flow's slots (counters).
    pub(crate) flows: Option<Stat>,
    pub(crate) borrowed: Option<Stat>,
    pub(crate) flow_rejected: Option<Stat>,
    /// What a dry run let through that would have been refused or queued
    /// (every rule: `set` can start a dry run).
    pub(crate) dry_run_refused: Option<Stat>,
    pub(crate) dry_run_queued: Option<Stat>,
    /// With `--exempt`: requests of exempt clients.
    pub(crate) exempt: Option<Stat>,
    /// With `--block`: blocks started by a refusal, and requests refused by
    /// a block in force (also one made by the `block` command). Only then:
    /// 9.2 has room for ~1400 plugin metrics in all.
    pub(crate) blocks: Option<Stat>,
    pub(crate) blocked: Option<Stat>,
}

pub(crate) fn bump(stat: Option<Stat>, n: i64) {
    if let Some(s) = stat {
        s.add(n);
    }
}

impl Metrics {
    pub(crate) fn new(o: &Options) -> Metrics {
        let make = |m: &str| match Stat::find_or_create(&metric_name(&o.prefix, &o.metric_tag, m)) {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("{e}");
                None
            }
        };
        Metrics {
            queued: make("queued"),
            rejected: make("rejected"),
            expired: make("expired"),
            resumed: make("resumed"),
            admitted: make("admitted"),
            abandoned: make("abandoned"),
            active: make("active"),
            waiting: make("waiting"),
            keys: o.key.as_ref().and_then(|_| make("keys")),
            evicted: o.key.as_ref().and_then(|_| make("evicted")),
            status_charged: o.count_status.and_then(|_| make("status_charged")),
            flows: o.fair.as_ref().and_then(|_| make("flows")),
            borrowed: o.fair.as_ref().and_then(|_| make("borrowed")),
            flow_rejected: o.fair.as_ref().and_then(|_| make("flow_rejected")),
            dry_run_refused: make("dry_run_refused"),
            dry_run_queued: make("dry_run_queued"),
            exempt: o.exempt.as_ref().and_then(|_| make("exempt")),
            blocks: (o.block_s > 0).then(|| make("blocks")).flatten(),
            blocked: (o.block_s > 0).then(|| make("blocked")).flatten(),
        }
    }
}

/// A rule's `active` level and `admitted` count, kept in its own atomics
/// and added to its metrics every second (`ats::stats::publish_deltas`, as
/// deltas: rules may share a metric name). Changing the metrics themselves
/// cost three `TSStatIntIncrement` per admitted transaction: on ATS 10 ~40
/// instructions each (docs/changelog.md, the 10.1 steps).
/// Operators read metrics seconds apart, and 9.2 shows them ~10 s late
/// anyway.
///
/// The rule and every held slot keep it, and with it its publisher: after a
/// reload, slots still held under the old rule stay in `active` until they
/// are given back, as when each slot changed the metric itself.
pub(crate) struct Live {
    counts: Arc<Counts>,
    _publisher: Option<Periodic>,
}

#[derive(Default)]
struct Counts {
    active: AtomicI64,
    admitted: AtomicU64,
}

/// How often a rule's `active` and `admitted` reach its metrics.
const LIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Live {
    pub(crate) fn new(m: &Metrics) -> Live {
        let counts = Arc::new(Counts::default());
        // The publisher reads the counts strongly: when it stops (the last
        // holder of Live is gone), its final look still sees them.
        let c = counts.clone();
        let read = move || {
            // `admitted` first (Acquire): the slots of the admissions it
            // counts are in the `active` read after it.
            let admitted = c.admitted.load(Ordering::Acquire);
            Some((c.active.load(Ordering::Relaxed), admitted))
        };
        let publisher = match ats::stats::publish_deltas(LIVE_EVERY, m.active, m.admitted, read) {
            Ok(p) => Some(p),
            Err(e) => {
                log::error!("cannot start the active/admitted metrics task: {e}");
                None
            }
        };
        Live {
            counts,
            _publisher: publisher,
        }
    }

    /// A slot taken (1) or given back (-1), in `active`.
    pub(crate) fn hold(&self, n: i64) {
        self.counts.active.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts an admitted transaction, after its slot (if any) was taken:
    /// once `admitted` shows it, `active` shows the slot.
    pub(crate) fn admit(&self) {
        self.counts.admitted.fetch_add(1, Ordering::Release);
    }
}

/// How often the key table's and fair limiter's counts reach the metrics.
const TABLES_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Every second, adds what changed in the key table to the `keys` gauge and
/// the `evicted` counter. Holds the limiter weakly, so a reloaded-away rule
/// stops publishing and takes its keys back out of the shared gauge.
pub(crate) fn keys<W: Waiter>(limiter: &Arc<Limiter<W>>, m: &Metrics) -> Option<Periodic> {
    limiter.keys()?;
    let weak = Arc::downgrade(limiter);
    let read = move || {
        let l = weak.upgrade()?;
        let t = l.keys()?;
        Some((t.len() as i64, t.evicted()))
    };
    match ats::stats::publish_deltas(TABLES_EVERY, m.keys, m.evicted, read) {
        Ok(p) => Some(p),
        Err(e) => {
            log::error!("cannot start the keys/evicted metrics task: {e}");
            None
        }
    }
}

/// Publishes a fair limiter's counters every second, as deltas (rules of a
/// group share the metrics' names and the limiter: each rule publishes its
/// share). Holds the limiter weakly, like the key metrics.
pub(crate) fn fair<W: Waiter>(limiter: &Arc<Limiter<W>>, m: &Metrics) -> Vec<Periodic> {
    if limiter.fair_stats().is_none() {
        return Vec::new();
    }
    let read = |pick: fn(FairStats) -> (i64, u64)| {
        let weak = Arc::downgrade(limiter);
        move || weak.upgrade()?.fair_stats().map(pick)
    };
    let tasks = [
        (
            m.flows,
            m.borrowed,
            read(|s| (i64::from(s.flows), s.borrowed)),
        ),
        (None, m.flow_rejected, read(|s| (0, s.flow_rejected))),
    ];
    tasks
        .into_iter()
        .filter_map(|(gauge, counter, read)| {
            match ats::stats::publish_deltas(TABLES_EVERY, gauge, counter, read) {
                Ok(p) => Some(p),
                Err(e) => {
                    log::error!("cannot start the fair metrics task: {e}");
                    None
                }
            }
        })
        .collect()
}
