//! Per-transaction and per-session state of rate_limit.so, and the guards
//! in it whose `Drop` gives back what a transaction held: a slot (`Held`),
//! a queue place (`Place`); each keeps its gauge exact.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use ats::stats::Stat;
use ats::{CloseHandler, CloseHook, Txn};
use limits::{BudgetToken, Nanos, Permit, Slots};
use parking_lot::Mutex;
use rate_limit_core::{Counted, Limiter, Outcome};

use crate::metrics::{bump, Live};
use crate::queue::{Queued, RateToken};
use crate::rule::{Globals, Rule};

/// A held slot, counted in its rule's `active` level.
pub(crate) struct Held {
    pub(crate) _permit: Permit<Queued>,
    live: Arc<Live>,
}

impl Held {
    pub(crate) fn new(permit: Permit<Queued>, rule: &Rule) -> Held {
        rule.live.hold(1);
        Held {
            _permit: permit,
            live: rule.live.clone(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.live.hold(-1);
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

/// The slot of the common case, a rule's only entry admitting with a slot
/// and nothing to decorate: detached from its permit and given back by the
/// rule's own TXN_CLOSE hook, so the transaction stores nothing (the least
/// a remap limiter does; storing a `PerTxn::Held` cost ~180 instructions a
/// request more: BENCHMARKS.md). Built for a rule whose limiter has
/// rule-wide slots.
pub(crate) struct SlotRelease {
    slots: Arc<Slots<Queued>>,
    live: Arc<Live>,
    /// `--limit=auto`: the limiter whose controller learns from the
    /// request before its slot goes back (`auto.rs`).
    auto: Option<Arc<Limiter<Queued>>>,
}

impl SlotRelease {
    pub(crate) fn new(
        slots: Arc<Slots<Queued>>,
        live: Arc<Live>,
        auto: Option<Arc<Limiter<Queued>>>,
    ) -> SlotRelease {
        SlotRelease { slots, live, auto }
    }
}

impl CloseHandler for SlotRelease {
    fn closed(&self, txn: Txn<'_>) {
        if let Some(l) = &self.auto {
            sample(l, txn);
        }
        // As `Held`'s drop: the gauge, then the slot (which may admit the
        // next waiter).
        self.live.hold(-1);
        self.slots.release_detached();
    }
}

/// `--limit=auto`: tells the controller what the origin did for `txn` (nothing for a
/// request that never reached it: a cache hit teaches nothing). A 5xx or
/// no answer is a failure, never an RTT: a fast error is no spare capacity.
/// A busy limiter measures a share of its transactions, chosen before any
/// read (inlined: the others pay the question alone, ~10 instructions).
#[inline]
pub(crate) fn sample(limiter: &Limiter<Queued>, txn: Txn<'_>) {
    if limiter.auto_wants_sample() {
        measure(limiter, txn);
    }
}

/// What `sample` measures: the origin's answer, its status and timing
/// (~200 instructions on 9.2, two thirds of them TS API calls and the clock).
#[inline(never)]
fn measure(limiter: &Limiter<Queued>, txn: Txn<'_>) {
    let Some(reply) = txn.origin_reply() else {
        return;
    };
    let Some(outcome) = Outcome::of(reply.response()) else {
        return;
    };
    limiter.auto_sample(outcome);
}

/// The TXN_CLOSE hook of an auto rule's requests whose slot is in their
/// state (not the slot-release hook's): samples them.
pub(crate) struct Sampler {
    limiter: Arc<Limiter<Queued>>,
}

impl Sampler {
    pub(crate) fn new(limiter: Arc<Limiter<Queued>>) -> Sampler {
        Sampler { limiter }
    }
}

impl CloseHandler for Sampler {
    fn closed(&self, txn: Txn<'_>) {
        sample(&self.limiter, txn);
    }
}

impl SlotRelease {
    /// Takes a free slot for `txn` if nobody waits, to give back at its
    /// close; false if the request must take the full path.
    pub(crate) fn try_hold(hook: &CloseHook<SlotRelease>, txn: Txn<'_>) -> bool {
        let r = hook.handler();
        if !r.slots.try_acquire_detached() {
            return false;
        }
        // `active` before `admitted`, as everywhere (lib.rs).
        r.live.hold(1);
        r.live.admit();
        hook.add(txn);
        true
    }
}

impl Rule {
    /// Keeps an admitted request's slot until TXN_CLOSE, where nothing else
    /// of the request is kept (see `lib.rs`).
    pub(crate) fn hold_until_close(&self, g: &Globals, txn: Txn<'_>, permit: Permit<Queued>) {
        let permit = match &self.release {
            Some(r) if Arc::ptr_eq(permit.slots(), &r.handler().slots) => match permit.detach() {
                Ok(()) => {
                    self.live.hold(1);
                    r.add(txn);
                    return;
                }
                Err(p) => p,
            },
            _ => permit,
        };
        // A keyed or fair slot: in the transaction's state. If the state
        // is taken, the value comes back and dropping it frees the slot.
        let _ = g.txn.set(
            txn,
            PerTxn::Held {
                _slot: Held::new(permit, self),
            },
        );
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
    pub(crate) central: Mutex<Option<Box<crate::central::rule_store::TxnCentral>>>,
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
pub(crate) type SessionSlots = rate_limit_core::session::SessionSlots<Held, Queued>;
