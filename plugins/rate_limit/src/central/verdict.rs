//! What the store's answer to a decision means: read once, counted once in
//! the store's metrics, for the live path (`central.rs`) and the dry run
//! (`dry.rs`).

use std::time::Duration;

use rate_limit_core::store::Failure;
use store::redis::Reply;
use store::Answer;

use super::rule_store::RuleStore;
use crate::metrics::bump;
use crate::rule::Rule;
use rate_limit_core::Refused;

/// What the store's answer to a decision means, live or in a dry run.
pub(super) enum Verdict {
    Admitted,
    /// Over the rate, at `--limit`, or blocked (`--block`).
    Refused(Refused),
    /// An error or no answer in time: `--store-failure` decides.
    Failed,
}

impl RuleStore {
    /// Counts an answer in the store's metrics (latency, decisions, errors,
    /// timeouts) and says what it means: one reading for the live and the
    /// dry-run path.
    pub(super) fn verdict(&self, waited: Duration, answer: Answer<Reply>) -> Verdict {
        let m = self.metrics;
        m.latency(waited);
        match answer {
            Answer::Reply(Reply::Admitted { .. }) => {
                bump(m.decisions, 1);
                Verdict::Admitted
            }
            Answer::Reply(Reply::TooSoon { .. }) => {
                bump(m.decisions, 1);
                Verdict::Refused(Refused::Rate)
            }
            Answer::Reply(Reply::Blocked { started, .. }) => {
                bump(m.decisions, 1);
                Verdict::Refused(if started {
                    Refused::BlockStarted
                } else {
                    Refused::Blocked
                })
            }
            Answer::Reply(_) => {
                bump(m.decisions, 1);
                Verdict::Refused(Refused::QueueFull)
            }
            Answer::Error(e) => {
                bump(m.errors, 1);
                log::debug!("store {}: {e}", self.store.url);
                Verdict::Failed
            }
            Answer::Timeout => {
                bump(m.timeouts, 1);
                Verdict::Failed
            }
        }
    }
}

/// The rule's `--store-failure` (open when it has no store, which a
/// decision's rule always has).
pub(super) fn failure(rule: &Rule) -> Failure {
    rule.opts
        .store
        .as_ref()
        .map_or(Failure::Open, |s| s.failure)
}
