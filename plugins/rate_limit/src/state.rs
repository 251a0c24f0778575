//! Per-transaction and per-session state of rate_limit.so, and the guards
//! in it whose `Drop` gives back what a transaction held: a slot (`Held`),
//! a queue place (`Place`); each keeps its gauge exact.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use ats::sched::Periodic;
use ats::stats::Stat;
use limits::{BudgetToken, Nanos, Permit, Ticket};
use parking_lot::Mutex;
use rate_limit_core::mates::Mates;
use rate_limit_core::Counted;
use rate_limit_core::{metric_name, Options};

use crate::queue::{Queued, RateToken};
use crate::rule::Rule;

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

    /// Counts an admitted transaction, after its slot (if any) was taken:
    /// once `admitted` shows it, `active` shows the slot.
    pub(crate) fn admit(&self) {
        self.counts.admitted.fetch_add(1, Ordering::Release);
    }
}

/// A held slot, counted in its rule's `active` level.
pub(crate) struct Held {
    pub(crate) _permit: Permit<Queued>,
    live: Arc<Live>,
}

impl Held {
    pub(crate) fn new(permit: Permit<Queued>, rule: &Rule) -> Held {
        rule.live.counts.active.fetch_add(1, Ordering::Relaxed);
        Held {
            _permit: permit,
            live: rule.live.clone(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.live.counts.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A queue place, counted in the `waiting` gauge.
pub(crate) struct Place {
    pub(crate) _token: BudgetToken,
    pub(crate) gauge: Option<Stat>,
}

impl Drop for Place {
    fn drop(&mut self) {
        bump(self.gauge, -1);
    }
}

/// What happened to a transaction, for its response headers.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Fate {
    Admitted = 0,
    Waiting = 1,
    Resumed = 2,
    Refused = 3,
    /// A dry run let it through where it would have been refused, or (with
    /// `--store`) before Redis decided: decorated like an admitted request
    /// (`--ratelimit-headers`), never charged (`--count-status`): the live
    /// rule would not charge a refusal.
    DryRun = 4,
}

/// What rate_limit keeps on a transaction; dropped at TXN_CLOSE, which
/// releases what it holds.
pub(crate) enum PerTxn {
    /// The common case, kept small: the rule's only entry admitted the
    /// request with a slot and has nothing to decorate, so no hook but
    /// TXN_CLOSE and no later entry will read it. Building, storing and
    /// dropping the full state was most of our own instructions per request
    /// (docs/changelog.md, the hot-path work of issue 15).
    Held { _slot: Held },
    /// The entries' states, in remap order.
    Entries(TxnState),
}

impl PerTxn {
    pub(crate) fn entries(&self) -> Option<&TxnState> {
        match self {
            PerTxn::Entries(s) => Some(s),
            PerTxn::Held { .. } => None,
        }
    }
}

/// One rate_limit entry's state on a transaction.
pub(crate) struct TxnState {
    pub(crate) rule: Arc<Rule>,
    /// Whose limits it counts against: the rule's, its flow's or its key's.
    pub(crate) who: Counted,
    pub(crate) fate: AtomicU8,
    /// Slot held by this transaction (not with `--conntrack`): set at
    /// admission, or when a waiter is resumed (on its thread).
    pub(crate) held: Mutex<Option<Held>>,
    /// Set in DoRemap when the transaction must wait; taken at POST_REMAP.
    /// Boxed: waits are the rare path, and a small state moves cheaply.
    pub(crate) wait: Mutex<Option<Box<Pending>>>,
    /// The state of the next rate_limit entry on the same remap rule.
    pub(crate) next: OnceLock<Box<TxnState>>,
    /// SEND_RESPONSE_HDR is hooked (read on the chain's first state).
    pub(crate) decorating: AtomicBool,
    /// `--store`: the decision to ask at POST_REMAP, then the lease held.
    /// Boxed, like `wait`: a rule without a store keeps the state small
    /// (unboxed, its metrics and strings made every state ~3 copies of
    /// memcpy dearer: +87 instructions a request).
    pub(crate) central: Mutex<Option<Box<crate::central::TxnCentral>>>,
}

impl TxnState {
    /// This state and those of the later entries, in remap order.
    pub(crate) fn chain(&self) -> impl Iterator<Item = &TxnState> {
        std::iter::successors(Some(self), |s| s.next.get().map(|b| &**b))
    }

    /// Appends a later entry's state; DoRemap runs the entries one after
    /// the other on the transaction's thread, so nothing races here.
    pub(crate) fn push(&self, st: TxnState) -> Option<&TxnState> {
        let last = self.chain().last()?;
        last.next.set(Box::new(st)).ok()?;
        last.next.get().map(|b| &**b)
    }

    pub(crate) fn rule_is(&self, rule: &Rule) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.rule), rule)
    }

    /// The state `rule`'s entry keeps on this transaction.
    pub(crate) fn of(&self, rule: &Rule) -> Option<&TxnState> {
        self.chain().find(|s| s.rule_is(rule))
    }

    /// An entry refused the request.
    pub(crate) fn refused(&self) -> bool {
        self.chain().any(|s| s.fate() == Fate::Refused)
    }

    pub(crate) fn fate(&self) -> Fate {
        match self.fate.load(Ordering::Acquire) {
            1 => Fate::Waiting,
            2 => Fate::Resumed,
            3 => Fate::Refused,
            4 => Fate::DryRun,
            _ => Fate::Admitted,
        }
    }

    pub(crate) fn set_fate(&self, o: Fate) {
        self.fate.store(o as u8, Ordering::Release);
    }
}

/// A wait decided in DoRemap. If the transaction never reaches POST_REMAP
/// (another plugin ends it), dropping this with its state gives the queue
/// place and the rate token back.
pub(crate) struct Pending {
    pub(crate) place: Place,
    pub(crate) since: Nanos,
    /// Time to wait for the rate bucket (the token is already reserved).
    pub(crate) rate_delay: Nanos,
    pub(crate) rate: Option<RateToken>,
    pub(crate) holder: Holder,
    pub(crate) who: Counted,
}

/// Where a slot goes once admitted.
pub(crate) enum Holder {
    Txn,
    Session(Arc<SessionSlots>),
}

/// Slots held by a client session (`--conntrack`), released at SSN_CLOSE.
/// Its transactions (HTTP/2 streams) may run on several threads: each part
/// has its own lock; `waiting`'s is taken before a queue's, never after,
/// and neither is held while a transaction is resumed.
#[derive(Default)]
pub(crate) struct SessionSlots {
    /// By limiter id.
    pub(crate) held: Mutex<Vec<(u64, Option<Held>)>>,
    /// Its transactions waiting for a slot, to pass with the one that gets it.
    waiting: Mutex<Mates<Queued>>,
    /// Limiters whose dry run let it through as a would-be waiter: it
    /// passes them only while they are still in a dry run.
    dry: Mutex<Vec<u64>>,
}

impl SessionSlots {
    /// Holds a slot of any limiter.
    pub(crate) fn holds_any(&self) -> bool {
        self.held.lock().iter().any(|(_, h)| h.is_some())
    }

    pub(crate) fn admitted(&self, limiter: u64) -> bool {
        self.held.lock().iter().any(|(r, _)| *r == limiter)
    }

    /// Let through by `limiter`'s dry run (see `dry`).
    pub(crate) fn dry_admitted(&self, limiter: u64) -> bool {
        self.dry.lock().contains(&limiter)
    }

    pub(crate) fn keep_dry(&self, limiter: u64) {
        let mut v = self.dry.lock();
        if !v.contains(&limiter) {
            v.push(limiter);
        }
    }

    pub(crate) fn keep(&self, rule: u64, held: Option<Held>) {
        let mut v = self.held.lock();
        if !v.iter().any(|(r, _)| *r == rule) {
            v.push((rule, held));
            return;
        }
        // Two transactions of one session raced for a slot: give the second
        // back, outside the lock (dropping it may admit a waiter).
        drop(v);
        drop(held);
    }

    /// Notes a transaction waiting in `limiter`'s queue (before it looks at
    /// `admitted` once more: whoever keeps the slot after that look finds
    /// it in `take_waiting`), unless the session tracks too many.
    pub(crate) fn add_waiting(&self, limiter: u64, t: &Ticket<Queued>) {
        self.waiting.lock().add(limiter, t);
    }

    /// Takes the session's waiters out of `limiter`'s queue (after the
    /// session kept its slot there): O(its waiters).
    pub(crate) fn take_waiting(&self, limiter: u64) -> Vec<Queued> {
        self.waiting.lock().take(limiter)
    }
}
