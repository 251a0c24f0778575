//! throttle.so: cache-aware overload protection for a remap rule.
//!
//! One transaction, top to bottom:
//! 1. DoRemap: keep the rule in per-transaction state; hook CACHE_LOOKUP_COMPLETE.
//! 2. CACHE_LOOKUP_COMPLETE: a fresh hit is served and not counted. Anything
//!    else takes one of the rule's `max` places, held until TXN_CLOSE. With no
//!    place left, a stale hit within its allowance is served from cache as if
//!    fresh; everything else is answered 503.
//! 3. SEND_REQUEST_HDR (stale only): ATS can still decide to contact the
//!    origin for a hit forced fresh (e.g. authentication); that request
//!    holds no place, so it is answered 503 instead.
//! 4. SEND_RESPONSE_HDR: `Warning: 110` on stale responses, `no-store` on 503s.
//! 5. TXN_CLOSE: dropping the state gives the place back, aborts included.
//!    With `max:auto`, the rule's sampler runs first: it tells the
//!    controller how long the origin took, and the learned max applies
//!    ([`auto`]).
//!
//! Every `statfreq` ms a timer writes the rule's interval figures to
//! `throttle.log`; the same events feed `plugin.throttle.<id>.*` metrics.
//! `traffic_ctl plugin msg throttle` shows and changes live rules ([`ctl`]).
#![forbid(unsafe_code)]

mod auto;
mod ctl;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ats::sched::{Periodic, Pool};
use ats::stats::Stat;
use ats::textlog::TextLog;
use ats::{
    CacheLookup, Done, Hook, HookCont, HookHandler, HookId, RemapArgs, RemapPlugin, RemapRequest,
    RemapStatus, Txn, TxnData,
};
use optspec::files::FsFiles;
use throttle_core::params;
use throttle_core::stale::{self, Cached, Verdict};
use throttle_core::{log_line, Entry, Gate, Ticket};

const STALE_WARNING: &str = "110 - \"Response is stale\"";

/// One remap rule: what ATS holds between NewInstance and DeleteInstance.
/// Dropping it stops the statistics timer; the [`Rule`] itself lives on
/// while the timer's last tick or a transaction still holds it.
struct Throttle {
    rule: Arc<Rule>,
    _stats: Option<Periodic>,
    /// `max:auto`: the rule's sampling hook and gauges.
    learning: Option<auto::Learning>,
}

struct Rule {
    id: String,
    /// The rule's from-URL (a name for `traffic_ctl plugin msg throttle`).
    from: String,
    /// The stale allowance in seconds; changeable live, as the gate's max.
    stale: AtomicU32,
    statfreq_ms: u32,
    gate: Gate,
    /// `max:auto`: the controller that sets the gate's max, with its
    /// bounds, and the count of entries into a crowd (`auto.rs`).
    auto: Option<Arc<adaptive::Controller>>,
    bounds: Option<adaptive::Bounds>,
    crowded: AtomicU64,
    metrics: Metrics,
    /// Cleared when ATS deletes the rule (a reload): the commands skip it
    /// while its last transactions finish.
    live: AtomicBool,
}

impl AsRef<Gate> for Rule {
    fn as_ref(&self) -> &Gate {
        &self.gate
    }
}

/// `plugin.throttle.<id>.*`, cumulative (ATS sums them over threads).
struct Metrics {
    /// Gauge kept as +1/-1: uncached requests holding a place now.
    inflight: Stat,
    /// Uncached requests given a place.
    admitted: Stat,
    /// Fresh cache hits, passed through without counting.
    fresh: Stat,
    /// Responses served stale because the rule was full.
    stale: Stat,
    /// 503s because the rule was full.
    unavailable: Stat,
}

impl Metrics {
    fn new(id: &str) -> Result<Metrics, String> {
        let stat = |name: &str| Stat::find_or_create(&format!("plugin.throttle.{id}.{name}"));
        Ok(Metrics {
            inflight: stat("inflight")?,
            admitted: stat("admitted")?,
            fresh: stat("fresh")?,
            stale: stat("stale")?,
            unavailable: stat("unavailable")?,
        })
    }
}

const PASS: u8 = 0;
const STALE: u8 = 1;
const UNAVAILABLE: u8 = 2;

/// Per-transaction state, dropped at TXN_CLOSE.
struct TxnState {
    ticket: Ticket<Arc<Rule>>,
    outcome: AtomicU8,
    /// `max:auto`: the load it was sent into (`auto.rs`).
    entry: auto::Entry,
}

impl TxnState {
    fn rule(&self) -> &Rule {
        self.ticket.gate()
    }

    /// Gives the place back (once), keeping the gauge in step.
    fn release(&self) {
        if self.ticket.leave() {
            self.rule().metrics.inflight.dec();
        }
    }
}

impl Drop for TxnState {
    fn drop(&mut self) {
        self.release();
    }
}

struct Globals {
    hooks: HookCont,
    state: TxnData<TxnState>,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// This copy's handle on `throttle.log` (copies of the .so share the file).
static LOG: OnceLock<Result<TextLog, String>> = OnceLock::new();

fn text_log() -> Result<&'static TextLog, String> {
    LOG.get_or_init(|| TextLog::create("throttle", true))
        .as_ref()
        .map_err(Clone::clone)
}

impl RemapPlugin for Throttle {
    const NAME: &'static str = "throttle";

    fn init() -> Result<(), String> {
        if GLOBALS.get().is_none() {
            let g = Globals {
                hooks: HookCont::new(Hooks)?,
                state: TxnData::new("throttle")?,
            };
            let _ = GLOBALS.set(g);
            ctl::init();
        }
        Ok(())
    }

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        let p = params::parse(args.options(), &ats::config_dir(), &FsFiles)?;
        let id =
            p.id.clone()
                .unwrap_or_else(|| params::default_id(args.from_url));
        let auto = p.auto.and_then(|b| auto::controller(&id, args.from_url, b));
        let rule = Arc::new(Rule {
            metrics: Metrics::new(&id)?,
            from: args.from_url.to_owned(),
            stale: AtomicU32::new(p.stale),
            statfreq_ms: p.statfreq_ms,
            // A controller taken over from a reloaded rule goes on from its max.
            gate: Gate::new(auto.as_ref().map_or(p.max, |c| c.limit())),
            auto,
            bounds: p.auto,
            crowded: AtomicU64::new(0),
            live: AtomicBool::new(true),
            id,
        });
        let learning = match &rule.auto {
            Some(c) => Some(auto::Learning::start(&rule, c)?),
            None => None,
        };
        let stats = if p.statfreq_ms > 0 {
            let log = text_log()?;
            let r = rule.clone();
            let every = Duration::from_millis(u64::from(p.statfreq_ms));
            Some(Periodic::start(every, Pool::Task, move || {
                if let Err(e) = log.write(&log_line(&r.id, &r.gate.take_interval())) {
                    log::warn!("throttle.log: a line of rule {} was dropped: {e}", r.id);
                }
            })?)
        } else {
            None
        };
        let max = match p.auto {
            Some(b) => format!("auto ({}..={}, now {})", b.min, b.max, rule.gate.max()),
            None => p.max.to_string(),
        };
        log::info!(
            "rule {} id={} max={max} stale={}s statfreq={}ms",
            args.from_url,
            rule.id,
            p.stale,
            p.statfreq_ms
        );
        ctl::enlist(&rule);
        Ok(Throttle {
            rule,
            _stats: stats,
            learning,
        })
    }

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, _req: &mut RemapRequest<'_>) -> RemapStatus {
        let Some(g) = GLOBALS.get() else {
            return RemapStatus::NoRemap;
        };
        if let Some(l) = &self.learning {
            // Before the state's own TXN_CLOSE hook: it samples while the
            // place is held (`auto.rs`).
            l.sampler.add(txn);
        }
        let state = TxnState {
            ticket: Ticket::new(self.rule.clone()),
            outcome: AtomicU8::new(PASS),
            entry: auto::Entry::default(),
        };
        if g.state.set(txn, state).is_err() {
            // Throttled twice in one remap chain: the first rule governs.
            log::debug!("txn {}: already throttled by another rule", txn.id());
            return RemapStatus::NoRemap;
        }
        txn.hook(HookId::CacheLookupComplete, &g.hooks);
        RemapStatus::NoRemap
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.rule.live.store(false, Ordering::Release);
        log::debug!("rule {} deleted", self.rule.id);
    }
}

impl Drop for Rule {
    fn drop(&mut self) {
        log::debug!("rule {} released", self.id);
    }
}

struct Hooks;

impl HookHandler for Hooks {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        let Some(g) = GLOBALS.get() else {
            return hook.resume();
        };
        let Some(state) = g.state.get(hook.txn()) else {
            return hook.resume();
        };
        match hook.id() {
            HookId::CacheLookupComplete => match admit(g, state, hook.txn()) {
                Decision::Continue => hook.resume(),
                Decision::Unavailable => hook.error(503),
            },
            HookId::SendRequestHdr => {
                if state.outcome.load(Ordering::Acquire) == STALE {
                    // ATS is going to the origin after all: it has no place.
                    log::debug!("txn {}: stale hit went to origin; 503", hook.txn().id());
                    refuse(g, state, hook.txn());
                    return hook.error(503);
                }
                hook.resume()
            }
            HookId::SendResponseHdr => {
                decorate(state, hook.txn());
                hook.resume()
            }
            _ => hook.resume(),
        }
    }
}

/// What CACHE_LOOKUP_COMPLETE does with the transaction.
enum Decision {
    Continue,
    Unavailable,
}

fn admit(g: &Globals, state: &TxnState, txn: Txn<'_>) -> Decision {
    let rule = state.rule();
    let lookup = txn.cache_lookup();
    if lookup == Some(CacheLookup::HitFresh) {
        // Served from cache, not counted. The lookup runs again after a cache
        // write-lock retry, and may then find what another request stored.
        state.release();
        rule.metrics.fresh.inc();
        return Decision::Continue;
    }
    match state.ticket.enter() {
        Entry::Entered => {
            rule.metrics.inflight.inc();
            rule.metrics.admitted.inc();
            auto::entered(rule, &state.entry);
            return Decision::Continue;
        }
        Entry::AlreadyIn => return Decision::Continue,
        Entry::Refused => {}
    }
    if lookup == Some(CacheLookup::HitStale) {
        let verdict = stale_verdict(txn, rule);
        if verdict.serve() && txn.set_cache_lookup(CacheLookup::HitFresh) {
            state.outcome.store(STALE, Ordering::Release);
            txn.hook(HookId::SendRequestHdr, &g.hooks);
            txn.hook(HookId::SendResponseHdr, &g.hooks);
            return Decision::Continue;
        }
        log::debug!(
            "txn {}: rule {} full, stale hit not served: {verdict:?}",
            txn.id(),
            rule.id
        );
    }
    refuse(g, state, txn);
    Decision::Unavailable
}

fn refuse(g: &Globals, state: &TxnState, txn: Txn<'_>) {
    let rule = state.rule();
    let first = state.outcome.swap(UNAVAILABLE, Ordering::AcqRel) != UNAVAILABLE;
    if first {
        rule.gate.note_unavailable();
        rule.metrics.unavailable.inc();
    }
    txn.hook(HookId::SendResponseHdr, &g.hooks);
}

/// Counts a stale response when it is actually sent, and marks it.
fn decorate(state: &TxnState, txn: Txn<'_>) {
    let outcome = state.outcome.load(Ordering::Acquire);
    if outcome == STALE {
        let rule = state.rule();
        rule.gate.note_stale();
        rule.metrics.stale.inc();
    }
    let Some(mut resp) = txn.client_response() else {
        return;
    };
    match outcome {
        STALE => {
            resp.append("Warning", STALE_WARNING);
        }
        UNAVAILABLE => {
            resp.set("Cache-Control", "no-store");
        }
        _ => {}
    }
}

fn stale_verdict(txn: Txn<'_>, rule: &Rule) -> Verdict {
    let Some(resp) = txn.cached_response() else {
        return Verdict::Undated;
    };
    let cc = resp.values("Cache-Control");
    let (date, age, expires) = (resp.get("Date"), resp.get("Age"), resp.get("Expires"));
    let cached = Cached::from_headers(
        date.as_deref(),
        age.as_deref(),
        expires.as_deref(),
        cc.iter().map(Vec::as_slice),
    );
    let allowance = u64::from(rule.stale.load(Ordering::Relaxed));
    stale::decide(&cached, throttle_core::httpdate::now(), allowance)
}

ats::remap_plugin!(Throttle);
