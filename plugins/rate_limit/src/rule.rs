//! A rule of rate_limit.so as loaded (`Rule`: its options, limiter,
//! metrics and what each mode needs), the process-wide objects (`Globals`,
//! created once in `init`) and the registry of limiters. Made in `load.rs`;
//! a transaction's path through it is `lib.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};

use ats::sched::Periodic;
use ats::{HookCont, SsnData, Txn, TxnData};
use limits::BudgetToken;
use parking_lot::Mutex;
use rate_limit_core::key::Client;
use rate_limit_core::refusal_log::Reason;
use rate_limit_core::registry::Registry;
use rate_limit_core::{enforce, headers, Counted, Limiter, Options, Refused, Shaped};

use crate::metrics::{bump, Metrics};
use crate::queue::Queued;
use crate::refusals::Who;
use crate::state::{Fate, PerTxn, Place, SessionSlots};
use crate::{exchange, refusals};

/// Process-wide objects, created once in `init`.
pub(crate) struct Globals {
    pub(crate) hooks: HookCont,
    pub(crate) txn: TxnData<PerTxn>,
    pub(crate) ssn: SsnData<Arc<SessionSlots>>,
}

pub(crate) static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// The limiters of every group and rule, by identity, across reloads: one
/// per loaded copy of the .so (see docs/rate_limit.md, "Groups and reloads").
/// Taken only while loading configurations, never by requests.
pub(crate) static REGISTRY: LazyLock<Mutex<Registry<Limiter<Queued>>>> =
    LazyLock::new(Mutex::default);

pub struct Rule {
    pub(crate) opts: Options,
    /// Its limiter (its group's, or its own, carried over reloads), as its
    /// shape: the calls that fit it, decided once at load.
    pub(crate) shaped: Shaped<Queued>,
    /// A later rate_limit entry on the same remap rule: the transaction may
    /// already carry an earlier entry's state.
    pub(crate) chained: bool,
    /// A later entry follows this one on the rule (set while the
    /// configuration loads): it will look for this entry's state.
    pub(crate) followed: Arc<AtomicBool>,
    pub(crate) metrics: Metrics,
    /// `active` and `admitted`, published every second.
    pub(crate) live: Arc<crate::metrics::Live>,
    /// With `--key`: publishes the `keys` gauge and `evicted` counter.
    pub(crate) _key_metrics: Option<Periodic>,
    /// With `--fair`: publishes `flows`, `borrowed` and `flow_rejected`.
    pub(crate) _fair_metrics: Vec<Periodic>,
    /// What `traffic_ctl plugin msg rate_limit` shows of the rule.
    pub(crate) card: Arc<crate::card::Card>,
    /// `--ratelimit-headers`: the RateLimit-Policy value, following live changes.
    pub(crate) policy: Option<headers::Policy>,
    /// A check for departed waiters is armed (only while anyone waits).
    pub(crate) watching: AtomicBool,
    /// `--store`: decided in Redis (see central.rs).
    pub(crate) store: Option<crate::central::rule_store::RuleStore>,
    /// `--peers`: the exchange runs while a rule holds it.
    pub(crate) _peers: Option<Arc<exchange::Exchange>>,
    /// `--log`: the refusal log.
    pub(crate) refusals: refusals::Refusals,
    /// With rule-wide slots: the TXN_CLOSE hook that gives back the slots
    /// of requests that keep nothing else (`Rule::hold_until_close`).
    pub(crate) release: Option<ats::CloseHook<crate::state::SlotRelease>>,
    /// `--limit=auto`: the TXN_CLOSE hook that samples requests whose slot
    /// is in their state (`auto.rs`), and the learned limit's gauges.
    pub(crate) sampler: Option<ats::CloseHook<crate::state::Sampler>>,
    pub(crate) _auto_metrics: Option<Arc<ats::stats::SharedGauges>>,
    /// A free slot is all that admits a request (`Rule::bare`, load.rs):
    /// no rate, key, flow, exemption, store, session or response to see,
    /// and no other entry on the remap rule before it.
    pub(crate) bare: bool,
}

impl Rule {
    /// Identifies the rule's limiter in session state (`--conntrack`): a
    /// connection admitted by one rule of a group, or by the rule before a
    /// reload, is admitted by the others.
    pub(crate) fn limiter_id(&self) -> u64 {
        self.limiter().id()
    }

    /// Its limiter, for what every shape has (identity, limits, reports).
    pub(crate) fn limiter(&self) -> &Arc<Limiter<Queued>> {
        self.shaped.limiter()
    }

    /// `--limit=auto`: the origin's answer to `txn`, which holds one of the
    /// rule's slots in its state, is to teach the limit at its close.
    pub(crate) fn sample_at_close(&self, txn: Txn<'_>) {
        if let Some(s) = &self.sampler {
            s.add(txn);
        }
    }

    /// A queue place, counted in the `waiting` gauge.
    pub(crate) fn place(&self, token: BudgetToken) -> Place {
        bump(self.metrics.waiting, 1);
        Place {
            _token: token,
            gauge: self.metrics.waiting,
        }
    }

    /// An admitted request's response matters: RateLimit fields, or
    /// (`--count-status`) its status may charge the rate.
    pub(crate) fn needs_response(&self) -> bool {
        self.opts.ratelimit_headers || self.opts.count_status.is_some()
    }

    /// Refused in remap: ATS answers with its body-factory page
    /// (Cache-Control: no-store), skipping POST_REMAP and the origin. In a
    /// dry run, counted and logged, and the request goes on.
    pub(crate) fn reject(self: &Arc<Self>, g: &Globals, txn: Txn<'_>, who: Counted, why: Reason) {
        self.reject_logged(g, txn, who, why, true);
    }

    /// The limiter's refusal: [`Rule::reject`], but a block (`--block`)
    /// writes one log line when it starts, none while it holds.
    pub(crate) fn refuse(self: &Arc<Self>, g: &Globals, txn: Txn<'_>, who: Counted, why: Refused) {
        let logged = self.refused(why);
        self.reject_logged(g, txn, who, why.into(), logged.is_some());
    }

    /// The refusal log's reason for a limiter's (or Redis's) refusal, with
    /// a block's counted in `blocks` or `blocked`; `None` for one a block
    /// in force refused (one line per block, none per refusal).
    pub(crate) fn refused(&self, why: Refused) -> Option<Reason> {
        match why {
            Refused::BlockStarted => bump(self.metrics.blocks, 1),
            Refused::Blocked => {
                bump(self.metrics.blocked, 1);
                return None;
            }
            _ => {}
        }
        Some(why.into())
    }

    fn reject_logged(
        self: &Arc<Self>,
        g: &Globals,
        txn: Txn<'_>,
        who: Counted,
        why: Reason,
        log: bool,
    ) {
        self.note_name(who);
        let dry = self.dry_for(who);
        if log {
            self.record_refusal(txn, who, why, 0, dry);
        }
        if dry {
            bump(self.metrics.dry_run_refused, 1);
            if self.opts.ratelimit_headers {
                self.attach(g, txn, Fate::DryRun, None, None, who);
            }
            return;
        }
        bump(self.metrics.rejected, 1);
        self.attach(g, txn, Fate::Refused, None, None, who);
        txn.set_status(self.opts.error);
    }

    /// In a dry run (`--dry-run`, or `set … dry_run=on`).
    pub(crate) fn dry_run(&self) -> bool {
        self.card.dry_run.load(Ordering::Relaxed)
    }

    /// A would-be refusal or wait of `who` is a dry run: the rule's, or
    /// (`--enforce`) `who` is outside the share refused for real, by its
    /// key's hash (the same every time), or per request without a key.
    pub(crate) fn dry_for(&self, who: Counted) -> bool {
        if self.dry_run() {
            return true;
        }
        let share = self.card.enforce.load(Ordering::Relaxed);
        if share >= enforce::ALL {
            return false;
        }
        !match who.key() {
            Some(k) => enforce::chosen(k.hash(), share),
            None => enforce::chosen_now(share),
        }
    }
}

impl Rule {
    /// Records a refusal of `txn` (an expiry, or a dry run's would-be
    /// refusal) in the refusal log, within the rule's line budget. Every
    /// refusal goes through here; metrics are the caller's. On the
    /// transaction's thread.
    pub(crate) fn record_refusal(
        &self,
        txn: Txn<'_>,
        who: Counted,
        reason: Reason,
        waited_ms: u64,
        dry_run: bool,
    ) {
        self.refusals.record(reason, waited_ms, dry_run, || Who {
            client: self.client_ip(txn),
            key: who.hash().map(|k| self.key_name(k)),
        });
    }

    /// [`Rule::record_refusal`] away from the transaction (a `--store`
    /// dry run's reply), with the client's address read before.
    pub(crate) fn record_refusal_of(
        &self,
        client: Option<Client>,
        who: Counted,
        reason: Reason,
        waited_ms: u64,
        dry_run: bool,
    ) {
        self.refusals.record(reason, waited_ms, dry_run, || Who {
            client,
            key: who.hash().map(|k| self.key_name(k)),
        });
    }

    /// A key as `top` shows it, or its hash if its name was not kept.
    fn key_name(&self, k: u64) -> String {
        self.card.name(k).unwrap_or_else(|| format!("#{k:016x}"))
    }
}
