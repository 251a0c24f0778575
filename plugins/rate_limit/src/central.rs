//! Exact mode (`--store=redis://…`): each admission is decided in Redis,
//! exactly across every proxy that shares the store and namespace. Here:
//! one decision's path, submitted, drained and resumed; the rule's store
//! client and metrics are `central/rule_store.rs`, what an answer means
//! `central/verdict.rs`.
//!
//! One transaction:
//! 1. DoRemap names the limiter's Redis keys, leaves them in the
//!    transaction's state and hooks POST_REMAP ([`remap`]).
//! 2. POST_REMAP parks the transaction and submits a decision to the
//!    store's client (crates/store: a bounded queue to its I/O thread,
//!    which never calls the TS API) ([`ask`]).
//! 3. The I/O thread wakes an ATS net thread through a socket ATS polls
//!    (`ats::wake`); there the completions are taken, the metrics counted
//!    and each transaction resumed on its own thread
//!    (`Parked::on_home`): admitted (with its lease), refused, or, when the
//!    store failed or timed out, as `--store-failure` says. A timer drainer,
//!    armed only while decisions are outstanding, is the fallback (ATS
//!    fires it ~10 ms late).
//! 4. TXN_CLOSE drops the transaction's lease, which submits its `ZREM`.
//!
//! One client (one I/O thread and connection) serves every rule naming the
//! same store URL and `--store-timeout`. The rules (and transactions in
//! flight) hold it; `STORES` only refers to it. When the last holder
//! is gone, e.g. a reload dropped or changed its `--store`, the client
//! stops: its thread exits and its connection closes (crates/store), and
//! the wake channel closes with the poller.

use std::sync::Arc;
use std::time::Duration;

use ats::{Done, HomeTxn, Parked, Txn};
use rate_limit_core::refusal_log::Reason;
use rate_limit_core::store::Failure;
use rate_limit_core::Admission;
use rate_limit_core::Counted;
use store::redis::{key_base, Reply};
use store::Answer;

use crate::metrics::bump;
use crate::queue::{error_page, park, state};
use crate::rule::{Globals, Rule};
use crate::state::{Fate, Held, Holder, Pending};
use rule_store::{Asked, Lease, TxnCentral};
use verdict::{failure, Verdict};

mod dry;
pub(crate) mod rule_store;
pub(crate) mod sync;
mod verdict;

pub(crate) use dry::dry_run;
pub(crate) use rule_store::done;

/// A decision in flight: the parked transaction its completion resumes.
struct Decision {
    rule: Arc<Rule>,
    parked: Parked,
    base: String,
    member: String,
    who: Counted,
}

/// DoRemap of a `--store` rule: the transaction will be decided in Redis at
/// POST_REMAP.
pub(crate) fn remap(rule: &Arc<Rule>, g: &Globals, txn: Txn<'_>, who: Counted) {
    let Some(rs) = &rule.store else { return };
    let base = crate::client::KEY_BYTES.with(|b| {
        let b = b.borrow();
        key_base(&rs.opts.namespace, who.key().map(|_| &b[..]))
    });
    if let Some(st) = rule.attach(g, txn, Fate::Waiting, None, None, who) {
        *st.central.lock() = Some(Box::new(TxnCentral::Pending(base)));
        txn.hook(ats::HookId::PostRemap, &g.hooks);
    }
}

/// POST_REMAP: submits the decision for the parked transaction.
pub(crate) fn ask(rule: Arc<Rule>, parked: Parked, base: String, who: Counted) {
    let Some(rs) = &rule.store else {
        return admit(rule, parked, None, None);
    };
    let (op, member) = rs.decide(&rule.opts, base.clone());
    let d = Decision {
        rule: rule.clone(),
        parked,
        base,
        member,
        who,
    };
    rs.ask(op, Box::new(d));
}

impl Asked for Decision {
    /// On the drainer's thread.
    fn completed(self: Box<Self>, waited: Duration, answer: Answer<Reply>) {
        let a = *self;
        let Some(rs) = &a.rule.store else {
            return admit(a.rule, a.parked, None, None);
        };
        match rs.verdict(waited, answer) {
            Verdict::Admitted => {
                let charge = a.rule.opts.count_status.map(|_| a.base.clone());
                let lease = (a.rule.opts.limit.is_some()).then(|| rs.lease(a.base, a.member));
                admit(a.rule, a.parked, lease, charge);
            }
            Verdict::Refused(why) => {
                let logged = a.rule.refused(why);
                refuse(a.rule, a.parked, a.who, logged);
            }
            Verdict::Failed => failed(a),
        }
    }

    fn failed(self: Box<Self>) {
        failed(*self);
    }
}

/// The store failed or did not answer in time: `--store-failure`.
/// (On the drainer's thread, or on the transaction's if the queue was full.)
fn failed(a: Decision) {
    match failure(&a.rule) {
        // Open: the response's charge (--count-status) still goes to Redis.
        Failure::Open => admit(a.rule, a.parked, None, Some(a.base)),
        Failure::Closed => refuse(a.rule, a.parked, a.who, Some(Reason::StoreFailure)),
        Failure::Local => local(a),
    }
}

/// `--store-failure=local`: this proxy's own limiter decides, as without
/// `--store` (waiting in its queue included).
fn local(a: Decision) {
    let Decision {
        rule, parked, who, ..
    } = a;
    // Decided here: with --count-status the response charges this
    // proxy's bucket (no `Charged` state).
    match rule.shaped.admit(who, &[]) {
        Admission::Go(permit) => {
            let held = permit.map(|p| Held::new(p, &rule));
            let r = rule.clone();
            parked.on_home(move |h| {
                if let Some(st) = state(&h, &r) {
                    *st.held.lock() = held;
                }
                resume(h, &r, None, None)
            });
        }
        Admission::Wait(w) => {
            let wait = Pending {
                place: rule.place(w.place),
                since: w.since,
                rate_delay: w.rate_delay,
                rate: w.rate,
                holder: Holder::Txn,
                who,
            };
            park(rule, parked, wait);
        }
        Admission::Reject(why) => {
            let logged = rule.refused(why);
            refuse(rule, parked, who, logged);
        }
    }
}

/// `base`: the keys decided on, which a `--count-status` response charges.
fn admit(rule: Arc<Rule>, parked: Parked, lease: Option<Lease>, base: Option<String>) {
    parked.on_home(move |h| resume(h, &rule, lease, base));
}

fn resume(h: HomeTxn<'_>, rule: &Rule, lease: Option<Lease>, base: Option<String>) -> Done {
    rule.live.admit();
    if let Some(st) = state(&h, rule) {
        st.set_fate(Fate::Admitted);
        let base = base.filter(|_| rule.opts.count_status.is_some());
        let kept = match (lease, base) {
            (held, Some(base)) => Some(TxnCentral::Charged { base, _held: held }),
            (Some(l), None) => Some(TxnCentral::Lease { _held: l }),
            (None, None) => None,
        };
        if let Some(k) = kept {
            *st.central.lock() = Some(Box::new(k));
        }
    }
    h.resume()
}

/// `why`: the refusal log's reason; `None` for a refusal by a block in
/// force (not logged).
fn refuse(rule: Arc<Rule>, parked: Parked, who: Counted, why: Option<Reason>) {
    parked.on_home(move |h| {
        bump(rule.metrics.rejected, 1);
        if let Some(why) = why {
            rule.record_refusal(h.txn(), who, why, 0, false);
        }
        if let Some(st) = state(&h, &rule) {
            st.set_fate(Fate::Refused);
        }
        let status = rule.opts.error;
        // From a hook ATS sends a bare status; give it the same kind of page.
        h.txn().set_error_body(&error_page(status), "text/html");
        h.fail(status)
    });
}
