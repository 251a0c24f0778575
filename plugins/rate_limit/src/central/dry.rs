//! `--store` in a dry run (`--dry-run`, or `set … dry_run=on`): the
//! decision is submitted to Redis at remap and the request goes on at once;
//! the reply, drained on an ATS thread like every store reply, is counted
//! and logged as what the live rule would have done.

use std::sync::Arc;
use std::time::Duration;

use ats::Txn;
use rate_limit_core::refusal_log::Reason;
use rate_limit_core::store::Failure;
use rate_limit_core::Admission;
use rate_limit_core::Counted;
use store::redis::{key_base, Reply};
use store::Answer;

use super::rule_store::{Asked, TxnCentral};
use super::verdict::{failure, Verdict};
use crate::metrics::bump;
use crate::rule::{Globals, Rule};
use crate::state::Fate;

/// A dry-run request's decision in flight: what its log line needs.
struct DryAsked {
    rule: Arc<Rule>,
    who: Counted,
    client: Option<rate_limit_core::key::Client>,
}

/// DoRemap of a `--store` rule in a dry run: the decision is submitted and
/// the request goes on at once. The reply comes back through the store's
/// usual hand-off (an ATS thread drains the completions: the I/O thread
/// never counts or logs), where a would-be refusal is counted and logged.
///
/// With `--limit`, the lease Redis may grant is held until TXN_CLOSE, as
/// the live rule holds it, so concurrent requests reach the limit and
/// their would-be refusals are seen. Its release is submitted after the
/// decision on the same client, which keeps their order (in a Cluster both
/// go to the node of the same key); releasing a lease never granted (a
/// refusal) removes nothing.
pub(crate) fn dry_run(rule: &Arc<Rule>, g: &Globals, txn: Txn<'_>, who: Counted) {
    let Some(rs) = &rule.store else { return };
    let base = crate::client::KEY_BYTES.with(|b| {
        let b = b.borrow();
        key_base(&rs.opts.namespace, who.key().map(|_| &b[..]))
    });
    let (op, member) = rs.decide(&rule.opts, base.clone());
    let asked = rs.ask(
        op,
        Box::new(DryAsked {
            rule: rule.clone(),
            who,
            // Read only for the refusal log.
            client: rule
                .refusals
                .enabled()
                .then(|| rule.client_ip(txn))
                .flatten(),
        }),
    );
    // Only a decision asked can have granted a lease.
    let lease = (asked && rule.opts.limit.is_some()).then(|| rs.lease(base, member));
    // Decorated (`--ratelimit-headers`) like an admitted request, never
    // charged (`--count-status`): the verdict comes later. Without a state
    // the lease is released here, still after its decision.
    if lease.is_some() || rule.opts.ratelimit_headers {
        if let Some(st) = rule.attach(g, txn, Fate::DryRun, None, None, who) {
            if let Some(l) = lease {
                *st.central.lock() = Some(Box::new(TxnCentral::Lease { _held: l }));
            }
        }
    }
}

impl Asked for DryAsked {
    /// A dry run's decision came back (on an ATS thread).
    fn completed(self: Box<Self>, waited: Duration, answer: Answer<Reply>) {
        let Some(rs) = &self.rule.store else { return };
        match rs.verdict(waited, answer) {
            // Its lease (`--limit`) is the transaction's, released at TXN_CLOSE.
            Verdict::Admitted => {}
            Verdict::Refused(why) => dry_refused(&self, self.rule.refused(why)),
            Verdict::Failed => self.failed(),
        }
    }

    /// A dry run's store failed: what `--store-failure` would have done.
    fn failed(self: Box<Self>) {
        let d = &*self;
        match failure(&d.rule) {
            Failure::Open => {}
            Failure::Closed => dry_refused(d, Some(Reason::StoreFailure)),
            // Decided as a dry run decides at remap: nothing held, and a wait
            // the live queue would have refused is a would-be refusal that
            // leaves no debt (`settle_dry_wait`, as on the plain path).
            Failure::Local => match d.rule.shaped.admit(d.who, &[]) {
                Admission::Go(permit) => drop(permit),
                Admission::Wait(w) => match d.rule.limiter().settle_dry_wait(w) {
                    Ok(()) => bump(d.rule.metrics.dry_run_queued, 1),
                    Err(why) => dry_refused(d, d.rule.refused(why)),
                },
                Admission::Reject(why) => dry_refused(d, d.rule.refused(why)),
            },
        }
    }
}

/// `why`: as `central::refuse`'s (`None`: a block in force, not logged).
fn dry_refused(d: &DryAsked, why: Option<Reason>) {
    bump(d.rule.metrics.dry_run_refused, 1);
    if let Some(why) = why {
        d.rule.record_refusal_of(d.client, d.who, why, 0, true);
    }
}
