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

use ats::poller::{Drain, Poller};
use ats::{Done, HomeTxn, Parked, Txn};
use rate_limit_core::store::Failure;
use rate_limit_core::Admission;
use rate_limit_core::Counted;
use store::redis::{key_base, Decide, Op, Reply};
use store::{Answer, Completion};

use crate::queue::{error_page, park, state};
use crate::refusals::Reason;
use crate::rule::{Globals, Rule};
use crate::state::{bump, Fate, Held, Holder, Pending};

/// Most completions handled per drainer run.
const DRAIN_MAX: usize = 4096;

mod dry;
mod rule_store;
pub(crate) mod sync;
mod verdict;

pub(crate) use dry::dry_run;
use dry::DryAsked;
pub(crate) use rule_store::{done, RuleStore, Store, StoreMetrics};
use verdict::{failure, Verdict};

/// What a completion resumes. Safety: the client's I/O thread drops what
/// is still queued when it exits, so a token that carries a parked
/// transaction must keep the client alive (`Asked`'s rule holds its
/// store; a `Sync` holds its syncer, which holds its store): the client
/// then never exits with such a token queued.
pub(crate) enum Token {
    Decide(Box<Asked>),
    /// A dry run's decision: counted and logged when it comes back; no
    /// transaction waits for it.
    DryRun(Box<DryAsked>),
    Release(StoreMetrics),
    /// `--count-status`: a response's charge (nothing waits for it).
    Charge(StoreMetrics),
    /// `--store-sync`: a key's exchange (its tag and the hits sent).
    Sync(Arc<sync::Syncer>, Box<[u8]>, u32),
}

pub(crate) struct Asked {
    rule: Arc<Rule>,
    parked: Parked,
    base: String,
    member: String,
    who: Counted,
}

/// What a `--store` rule keeps on a transaction.
pub(crate) enum TxnCentral {
    /// Named in DoRemap, to be asked at POST_REMAP.
    Pending(String),
    /// Admitted with a concurrency lease, given back when dropped.
    Lease { _held: Lease },
    /// `--count-status`, admitted by the store: the keys its response
    /// charges ([`RuleStore::charge`]), and its lease if any.
    Charged { base: String, _held: Option<Lease> },
}

impl TxnCentral {
    /// The keys to ask about, if the decision is still to be asked.
    pub(crate) fn take_pending(slot: &mut Option<Box<TxnCentral>>) -> Option<String> {
        match slot.take().map(|b| *b) {
            Some(TxnCentral::Pending(base)) => Some(base),
            other => {
                *slot = other.map(Box::new);
                None
            }
        }
    }
}

pub(crate) struct Lease {
    store: Arc<Store>,
    base: String,
    member: String,
    metrics: StoreMetrics,
}

impl Drop for Lease {
    /// At TXN_CLOSE (an ATS thread): the `ZREM` goes to the I/O thread. If
    /// it cannot (the queue is full), the lease expires after `--lease-ttl`.
    fn drop(&mut self) {
        let op = Op::Release {
            base: std::mem::take(&mut self.base),
            member: std::mem::take(&mut self.member),
        };
        let s = &self.store;
        match s.client.submit(op, Token::Release(self.metrics), s.timeout) {
            Ok(()) => Poller::arm(s),
            Err(_) => bump(self.metrics.errors, 1),
        }
    }
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

/// The decision to ask of Redis for `base`, and its lease member.
fn decide(rule: &Rule, rs: &RuleStore, base: String) -> (Op, String) {
    let o = &rule.opts;
    let member = rs.store.ids.next();
    let op = Op::Decide(Decide {
        base,
        interval_us: o.rate.map_or(0, |r| (1e6 / r).round().max(1.0) as u64),
        burst: o.burst,
        limit: o.limit.unwrap_or(0),
        member: member.clone(),
        lease_ttl_ms: rs.opts.lease_ttl_s * 1000,
        check_only: o.count_status.is_some(),
    });
    (op, member)
}

/// POST_REMAP: submits the decision for the parked transaction.
pub(crate) fn ask(rule: Arc<Rule>, parked: Parked, base: String, who: Counted) {
    let Some(rs) = &rule.store else {
        return admit(rule, parked, None, None);
    };
    let (op, member) = decide(&rule, rs, base.clone());
    let store = rs.store.clone();
    let token = Token::Decide(Box::new(Asked {
        rule: rule.clone(),
        parked,
        base,
        member,
        who,
    }));
    store.start_waker();
    match store.client.submit(op, token, store.timeout) {
        Ok(()) => Poller::arm(&store),
        Err((Token::Decide(a), _)) => {
            bump(rs.metrics.errors, 1);
            failed(*a);
        }
        Err(_) => {}
    }
}

impl Store {
    /// On a net thread (POST_REMAP), once: the I/O thread wakes this
    /// thread through a socket ATS polls (`ats::wake`) whenever it has
    /// handed back completions, so a decision resumes its transaction within
    /// microseconds. The timer drainer stays as the fallback.
    fn start_waker(self: &Arc<Self>) {
        Poller::open_wake(self, |notify| {
            self.client.set_notify(notify);
        });
    }
}

impl Drain for Store {
    fn poller(&self) -> &Poller {
        &self.poller
    }

    /// On a net thread: handles what completed (at most [`DRAIN_MAX`]).
    fn drain(&self) {
        self.client.drain(DRAIN_MAX, completed);
    }

    fn outstanding(&self) -> bool {
        self.client.outstanding() > 0
    }
}

fn completed(c: Completion<Reply, Token>) {
    let waited = c.submitted.elapsed();
    let a = match c.token {
        Token::Release(m) | Token::Charge(m) => {
            match c.answer {
                Answer::Reply(_) => {}
                Answer::Error(_) => bump(m.errors, 1),
                Answer::Timeout => bump(m.timeouts, 1),
            }
            return;
        }
        Token::Decide(a) => *a,
        Token::DryRun(d) => return dry::dry_completed(*d, waited, c.answer),
        Token::Sync(s, tag, hits) => return s.completed(tag, hits, c.answer),
    };
    let Some(rs) = &a.rule.store else {
        return admit(a.rule, a.parked, None, None);
    };
    match rs.verdict(waited, c.answer) {
        Verdict::Admitted => {
            let charge = a.rule.opts.count_status.map(|_| a.base.clone());
            let lease = (a.rule.opts.limit.is_some()).then(|| Lease {
                store: rs.store.clone(),
                base: a.base,
                member: a.member,
                metrics: rs.metrics,
            });
            admit(a.rule, a.parked, lease, charge);
        }
        Verdict::Refused(why) => refuse(a.rule, a.parked, a.who, why),
        Verdict::Failed => failed(a),
    }
}

/// The store failed or did not answer in time: `--store-failure`.
/// (On the drainer's thread, or on the transaction's if the queue was full.)
fn failed(a: Asked) {
    match failure(&a.rule) {
        // Open: the response's charge (--count-status) still goes to Redis.
        Failure::Open => admit(a.rule, a.parked, None, Some(a.base)),
        Failure::Closed => refuse(a.rule, a.parked, a.who, Reason::StoreFailure),
        Failure::Local => local(a),
    }
}

/// `--store-failure=local`: this proxy's own limiter decides, as without
/// `--store` (waiting in its queue included).
fn local(a: Asked) {
    let Asked {
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
        Admission::Reject(why) => refuse(rule, parked, who, why.into()),
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

fn refuse(rule: Arc<Rule>, parked: Parked, who: Counted, why: Reason) {
    parked.on_home(move |h| {
        bump(rule.metrics.rejected, 1);
        rule.record_refusal(h.txn(), who, why, 0, false);
        if let Some(st) = state(&h, &rule) {
            st.set_fate(Fate::Refused);
        }
        let status = rule.opts.error;
        // From a hook ATS sends a bare status; give it the same kind of page.
        h.txn().set_error_body(&error_page(status), "text/html");
        h.fail(status)
    });
}
