//! What a rule reports: metrics (`plugin.ip_throttle.<tag>.*`) and event
//! lines in `ip_throttle.log`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ats::sched::Periodic;
use ats::stats::Stat;
use ats::textlog::TextLog;
use ip_throttle_core::options::fmt_seconds;
use ip_throttle_core::{Action, Client, Decision, Event, LogEvents, Throttler};
use limits::MonotonicClock;

/// A rule's metrics; one that could not be created is skipped (and logged).
#[derive(Clone, Copy)]
pub(crate) struct Metrics {
    /// Requests passed at once (allowed, allow-listed or out of scope).
    passed: Option<Stat>,
    /// Requests delayed.
    delayed: Option<Stat>,
    /// Delayed requests that went on to the origin after their delay.
    resumed: Option<Stat>,
    /// Delayed requests whose client left during the delay.
    abandoned: Option<Stat>,
    /// 403: banned or deny-listed.
    forbidden: Option<Stat>,
    /// 503: over --max-concurrent.
    too_many: Option<Stat>,
    /// Bans added and ended.
    bans: Option<Stat>,
    unbans: Option<Stat>,
    /// Requests passed untracked: the state table was full of busy IPs.
    untracked: Option<Stat>,
    /// IPs tracked (gauge) and IPs forgotten to make room (counter).
    keys: Option<Stat>,
    evicted: Option<Stat>,
    /// With `--store`: steps run on the shared record, and those that fell
    /// back to local state (the store failed, or did not answer in time).
    store_decisions: Option<Stat>,
    store_errors: Option<Stat>,
    store_timeouts: Option<Stat>,
}

fn bump(s: Option<Stat>, n: i64) {
    if let Some(s) = s {
        s.add(n);
    }
}

impl Metrics {
    pub(crate) fn new(tag: &str, store: bool) -> Metrics {
        let make = |m: &str| match Stat::find_or_create(&format!("plugin.ip_throttle.{tag}.{m}")) {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("{e}");
                None
            }
        };
        Metrics {
            passed: make("passed"),
            delayed: make("delayed"),
            resumed: make("resumed"),
            abandoned: make("abandoned"),
            forbidden: make("forbidden"),
            too_many: make("too_many"),
            bans: make("bans"),
            unbans: make("unbans"),
            untracked: make("untracked"),
            keys: make("keys"),
            evicted: make("evicted"),
            store_decisions: store.then(|| make("store_decisions")).flatten(),
            store_errors: store.then(|| make("store_errors")).flatten(),
            store_timeouts: store.then(|| make("store_timeouts")).flatten(),
        }
    }
}

/// This copy's handle on `ip_throttle.log` (copies of the .so share the
/// file).
static LOG: OnceLock<Result<TextLog, String>> = OnceLock::new();

pub(crate) struct Reporter {
    tag: String,
    m: Metrics,
    log: &'static TextLog,
}

impl Reporter {
    pub(crate) fn new(tag: String, m: Metrics) -> Result<Reporter, String> {
        let log = LOG
            .get_or_init(|| TextLog::create("ip_throttle", true))
            .as_ref()
            .map_err(Clone::clone)?;
        Ok(Reporter { tag, m, log })
    }

    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// Counts a decision (what it would do, with `--log-only`) and logs
    /// its events.
    pub(crate) fn decision(&self, ip: Client, d: &Decision) {
        let m = &self.m;
        let counter = match d.would {
            Action::Pass => m.passed,
            Action::Delay(_) => m.delayed,
            Action::Forbid => m.forbidden,
            Action::TooMany => m.too_many,
        };
        bump(counter, 1);
        if d.untracked {
            bump(m.untracked, 1);
        }
        for e in d.events() {
            match e.kind {
                ip_throttle_core::EventKind::Ban => bump(m.bans, 1),
                ip_throttle_core::EventKind::Unban => bump(m.unbans, 1),
                _ => {}
            }
            self.event(ip, e, d.log_events, d.log_only);
        }
    }

    /// One line in `ip_throttle.log` (after ATS's timestamp), if the rule
    /// logs that event: `event=throttled ip=192.0.2.7 rule=http.example.com
    /// state=throttled delay=2.000 violations=1`, and ` dry_run=1` with
    /// `--log-only`. An unknown client is `ip=unknown`.
    pub(crate) fn event(&self, ip: Client, e: &Event, events: LogEvents, log_only: bool) {
        if !events.has(e.kind) {
            return;
        }
        let dry = if log_only { " dry_run=1" } else { "" };
        // A short line: it fits any log buffer. Not reported if dropped
        // (this runs on request paths, and a report could flood diags.log).
        let _ = self.log.write(&format!(
            "event={} ip={ip} rule={} state={} delay={} violations={}{dry}",
            e.kind.name(),
            self.tag,
            e.phase.name(),
            fmt_seconds(e.delay),
            e.violations
        ));
    }

    pub(crate) fn resumed(&self) {
        bump(self.m.resumed, 1);
    }

    pub(crate) fn abandoned(&self) {
        bump(self.m.abandoned, 1);
    }

    pub(crate) fn store_decision(&self) {
        bump(self.m.store_decisions, 1);
    }

    pub(crate) fn store_error(&self) {
        bump(self.m.store_errors, 1);
    }

    pub(crate) fn store_timeout(&self) {
        bump(self.m.store_timeouts, 1);
    }

    /// An unban outside a request (its timer, or the command).
    pub(crate) fn unbanned(&self) {
        bump(self.m.unbans, 1);
    }
}

const TABLE_METRICS_EVERY: Duration = Duration::from_secs(1);

/// Every second, adds what changed in the state table to the `keys` gauge
/// and the `evicted` counter. Holds the throttler weakly, so a reloaded-away
/// rule stops publishing and takes its keys back out of the shared gauge.
pub(crate) fn table_metrics(t: &Arc<Throttler<MonotonicClock>>, m: &Metrics) -> Option<Periodic> {
    let weak = Arc::downgrade(t);
    let read = move || {
        let t = weak.upgrade()?;
        Some((t.table().len() as i64, t.table().evicted()))
    };
    match ats::stats::publish_deltas(TABLE_METRICS_EVERY, m.keys, m.evicted, read) {
        Ok(p) => Some(p),
        Err(e) => {
            log::error!("cannot start the keys/evicted metrics task: {e}");
            None
        }
    }
}
