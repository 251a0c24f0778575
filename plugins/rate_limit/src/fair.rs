//! `--fair`: which flow a request belongs to, and the fair limiter's
//! metrics (`flows` gauge, `borrowed` and `flow_rejected` counters).

use std::sync::Arc;

use ats::sched::Periodic;
use ats::{RemapRequest, Txn};
use limits::FairStats;
use rate_limit_core::fair::FlowSource;
use rate_limit_core::{FairLimiter, Flow, Limiter};

use crate::client::{KeyView, KEY_BYTES};
use crate::queue::Queued;
use crate::rule::Rule;
use crate::state::Metrics;

impl Rule {
    /// The request's flow on the rule's fair limiter `l`: its session, or
    /// the value of its `--fair` source. Requests without one (no session,
    /// header missing) share the flow of the empty value.
    pub(crate) fn flow(
        &self,
        l: &FairLimiter<Queued>,
        txn: Txn<'_>,
        req: &RemapRequest<'_>,
    ) -> Flow {
        let source = self.opts.fair.as_ref().map(|f| &f.source);
        match source {
            None | Some(FlowSource::Session) => {
                let id = txn.ssn().map_or(0, |s| s.id());
                l.flow(&id.to_le_bytes())
            }
            Some(FlowSource::Key(spec)) => {
                let view = KeyView {
                    txn,
                    hdr: req.request_header(),
                    client: None,
                };
                KEY_BYTES.with(|buf| {
                    let mut buf = buf.borrow_mut();
                    if !spec.key(&view, &mut buf) {
                        buf.clear();
                    }
                    l.flow(&buf)
                })
            }
        }
    }
}

/// Publishes a fair limiter's counters every second, as deltas (rules of a
/// group share the metrics' names and the limiter: each rule publishes its
/// share). Holds the limiter weakly, like the key metrics.
pub(crate) fn metrics(limiter: &Arc<Limiter<Queued>>, m: &Metrics) -> Vec<Periodic> {
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
            match ats::stats::publish_deltas(crate::load::KEY_METRICS_EVERY, gauge, counter, read) {
                Ok(p) => Some(p),
                Err(e) => {
                    log::error!("cannot start the fair metrics task: {e}");
                    None
                }
            }
        })
        .collect()
}
