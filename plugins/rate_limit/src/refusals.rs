//! Recording a refusal: the one path every refused (or, in a dry run,
//! would-be refused) request takes to the refusal log (`--log`).
//!
//! The line budget is rate_limit_core::refusal_log's (pure): a rule writes
//! at most `LINES_PER_SECOND` event lines a second, then one summary. Lines
//! are built only when the budget lets them through, so past the budget a
//! refusal costs two atomic loads and a counter add (no lock). Called on
//! ATS threads only (remap, a parked transaction's own thread); the
//! flusher is an ATS task.

use std::sync::Arc;
use std::time::Duration;

use ats::sched::{Periodic, Pool};
use ats::textlog::TextLog;
use limits::{Clock, MonotonicClock};
use rate_limit_core::key::Client;
use rate_limit_core::refusal_log::{Event, LogBound, Reason, LINES_PER_SECOND};
use rate_limit_core::Options;

/// A rule's refusal log; without `--log`, recording is a no-op.
pub(crate) struct Refusals {
    log: Option<RuleLog>,
}

struct RuleLog {
    /// The rule's `--tag`, which names it in the lines.
    rule: String,
    /// Rules naming the same FILE share its object (`TextLog::create`).
    file: Arc<TextLog>,
    bound: Arc<LogBound>,
    _flusher: Option<Periodic>,
}

impl Drop for RuleLog {
    /// The rule is gone (a reload): what its current second suppressed is
    /// written now, or its counts would be lost with it.
    fn drop(&mut self) {
        if let Some(s) = self.bound.take_pending() {
            let _ = self.file.write(&s.line(&self.rule));
        }
    }
}

/// What is known of a refused client (read only when its line is written).
pub(crate) struct Who {
    /// After `--trusted-proxies` (possibly unknown).
    pub(crate) client: Option<Client>,
    /// `--key`: the key as `top` shows it.
    pub(crate) key: Option<String>,
}

impl Refusals {
    pub(crate) fn new(o: &Options) -> Result<Refusals, String> {
        let Some(name) = &o.log else {
            return Ok(Refusals { log: None });
        };
        let file = Arc::new(TextLog::create(name, true).map_err(|e| format!("--log={name}: {e}"))?);
        let bound = Arc::new(LogBound::new(LINES_PER_SECOND));
        // The last second's summary is written even when no event follows.
        let (b, f, rule) = (Arc::downgrade(&bound), file.clone(), o.metric_tag.clone());
        let flusher = Periodic::start(Duration::from_secs(1), Pool::Task, move || {
            let Some(b) = b.upgrade() else { return };
            let summary = b.flush(MonotonicClock.now());
            if let Some(s) = summary {
                let _ = f.write(&s.line(&rule));
            }
        });
        let flusher = match flusher {
            Ok(p) => Some(p),
            Err(e) => {
                log::error!("--log={name}: cannot start the summary task: {e}");
                None
            }
        };
        Ok(Refusals {
            log: Some(RuleLog {
                rule: o.metric_tag.clone(),
                file,
                bound,
                _flusher: flusher,
            }),
        })
    }

    /// `--log` is set: a refused client's address is worth reading.
    pub(crate) fn enabled(&self) -> bool {
        self.log.is_some()
    }

    /// Records one refusal (an expiry, or in a dry run a would-be refusal):
    /// a line if the rule's budget allows, else a count for the summary.
    /// `who` is asked only for a line that is written.
    pub(crate) fn record(
        &self,
        reason: Reason,
        waited_ms: u64,
        dry_run: bool,
        who: impl FnOnce() -> Who,
    ) {
        let Some(l) = &self.log else { return };
        let d = l.bound.event(MonotonicClock.now(), reason);
        // Not reported if ATS drops a line: a refusal path must not flood diags.log.
        if let Some(s) = d.summary {
            let _ = l.file.write(&s.line(&l.rule));
        }
        if d.write {
            let w = who();
            let e = Event {
                rule: &l.rule,
                client: w.client,
                key: w.key.as_deref(),
                reason,
                waited_ms,
                dry_run,
            };
            let _ = l.file.write(&e.line());
        }
    }
}
