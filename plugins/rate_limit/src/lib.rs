//! rate_limit.so: a drop-in for upstream's remap rate limiter.
//!
//! One transaction, top to bottom:
//! 1. `do_remap`: an `--exempt` client passes untouched (`client.rs`); then
//!    the rate bucket (if `--rate`; with `--count-status` only checked),
//!    then a concurrency slot (if a limit). In a dry run (`--dry-run`, or
//!    for a client `--enforce` leaves out) every would-be wait or refusal
//!    is counted and logged, and the request goes on. Admitted: the slot
//!    goes into per-transaction (or, with `--conntrack`, per-session) state,
//!    or (the rule's only entry, nothing to decorate) the rule's own
//!    TXN_CLOSE hook gives it back; either way when ATS closes it.
//!    Must wait: a queue place is taken and the transaction parks at
//!    POST_REMAP. Otherwise: rejected in remap, so ATS answers with its
//!    error page.
//! 2. POST_REMAP: park. A rate wait is a timer; a slot wait is a place in
//!    the rule's FIFO, resumed the moment a slot frees (`Waiter::admit`),
//!    or failed by a `--maxage` timer. Timers fire on the transaction's own
//!    thread; a slot freed elsewhere hands the waiter its permit at once and
//!    the rest (headers, status, resume) runs on its thread (`on_home`).
//!    With `--conntrack`, when one of a session's waiting transactions (its
//!    HTTP/2 streams) gets the slot, at remap or from the queue, its others
//!    waiting on that limiter leave the queue and pass with it
//!    (`Rule::resume_session_mates`, through the session's list of its
//!    waiters, `rate_limit_core::mates`).
//! 3. SEND_RESPONSE_HDR (refused, `--ratelimit-headers` or `--count-status`):
//!    a listed status charges the rate (`charge.rs`); `Retry-After`,
//!    `Cache-Control: no-store`, RateLimit fields.
//! 4. TXN_CLOSE / SSN_CLOSE: dropping the state drops the permit, which frees
//!    the slot and admits the next waiter. With `--limit=auto` the origin's
//!    answer teaches the learned limit first (`auto.rs`).
//!
//! The global mode (plugin.config's `rate_limit.so FILE.yaml`: TLS
//! connections per SNI at the client hello) is a path of its own, the
//! `rate_limit_global` crate. Beside the remap path: `rule.rs` is a rule as
//! loaded (and the process-wide objects), `load.rs` makes one and commits
//! reloads, `client.rs` finds the client and its key, `entries.rs` chains
//! several entries on one rule, `state.rs` is what a transaction holds,
//! `queue.rs` parks waiters, `central.rs` asks Redis (its client:
//! `central/rule_store.rs`), `metrics.rs` publishes a rule's metrics,
//! `refusals.rs` writes the refusal log, `exchange.rs` runs the peer
//! exchange, `card.rs` and `ctl.rs` answer `traffic_ctl plugin msg`.
#![forbid(unsafe_code)]

mod auto;
mod card;
mod central;
mod charge;
mod client;
mod ctl;
mod entries;
mod exchange;
mod fair;
mod load;
mod metrics;
mod queue;
mod refusals;
mod rule;
mod state;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ats::{
    Done, Hook, HookCont, HookHandler, HookId, ReloadStatus, RemapArgs, RemapPlugin, RemapRequest,
    RemapStatus, SsnData, Txn, TxnData,
};
use rate_limit_core::{headers, Admission, Counted, Shaped};

use crate::client::{ClientKey, KEY_BYTES};
use crate::entries::Earlier;
use crate::metrics::bump;
use crate::queue::park;
use crate::rule::{Globals, Rule, GLOBALS, REGISTRY};
use crate::state::{Fate, Held, Holder, Pending, PerTxn, SessionSlots, SlotRelease, TxnState};
use rate_limit_core::refusal_log::Reason;

impl RemapPlugin for Rule {
    const NAME: &'static str = "rate_limit";

    fn init() -> Result<(), String> {
        if GLOBALS.get().is_none() {
            let g = Globals {
                hooks: HookCont::new(Hooks)?,
                txn: TxnData::new("rate_limit")?,
                ssn: SsnData::new("rate_limit")?,
            };
            let _ = GLOBALS.set(g);
            ctl::init();
        }
        Ok(())
    }

    fn global_init(args: &[&str]) -> Result<(), String> {
        if rate_limit_global::init(args)? {
            // Its `show` and `reload` answer here (ctl.rs).
            ctl::init();
        }
        Ok(())
    }

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        let rule = Rule::new(args)?;
        log::info!("{}: {}", args.from_url, rule.opts.describe());
        for w in &rule.opts.warnings {
            log::warn!("{}: {w}", args.from_url);
        }
        Ok(rule)
    }

    fn pre_reload() {
        REGISTRY.lock().begin();
    }

    fn done() {
        crate::central::done();
    }

    fn post_reload(status: ReloadStatus) {
        load::commit(status);
    }

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, req: &mut RemapRequest<'_>) -> RemapStatus {
        // The common case first: a free slot is all the rule asks, and the
        // rule's TXN_CLOSE hook gives it back (state.rs). A later entry on
        // the remap rule may have appeared since load (`followed`); a full
        // limiter or a queue goes the whole way below.
        if let (true, Some(release)) = (self.bare, &self.release) {
            if !self.followed.load(Ordering::Relaxed) && SlotRelease::try_hold(release, txn) {
                return RemapStatus::NoRemap;
            }
        }
        let Some(g) = GLOBALS.get() else {
            return RemapStatus::NoRemap;
        };
        let earlier = if self.chained {
            self.earlier(g, txn)
        } else {
            Earlier::default()
        };
        if earlier.refused {
            // An earlier rate_limit entry on this rule refused the request.
            return RemapStatus::NoRemap;
        }
        let Ok(client) = self.exempt(txn, req) else {
            // Before any state: no slot, token, key or session state.
            bump(self.metrics.exempt, 1);
            return RemapStatus::NoRemap;
        };
        let mut holder = Holder::Txn;
        if self.opts.conntrack {
            if let Some(ssn) = txn.ssn() {
                // The session's slot list; None if another copy of the plugin
                // (after an upgrade) owns the session's state: then this
                // transaction holds its slot itself.
                let slots = match g.ssn.get(ssn) {
                    Some(s) => Some(s.clone()),
                    None => {
                        let s = Arc::new(SessionSlots::default());
                        g.ssn.set(ssn, s.clone()).ok().map(|()| s)
                    }
                };
                if let Some(slots) = slots {
                    // A connection already admitted by this rule passes.
                    // One a dry run let through passes only while it lasts.
                    let id = self.limiter_id();
                    if slots.admitted(id) || (self.dry_run() && slots.dry_admitted(id)) {
                        return RemapStatus::NoRemap;
                    }
                    holder = Holder::Session(slots);
                }
            }
        }
        let who = match self.client_key(txn, req, client) {
            ClientKey::Counted(who) => who,
            ClientKey::Pass => return RemapStatus::NoRemap,
            ClientKey::Refuse => {
                self.reject(g, txn, Counted::Rule, Reason::KeyMissing);
                return RemapStatus::NoRemap;
            }
        };
        if self.opts.limit.is_some() && earlier.waits {
            // It would wait behind an earlier entry's wait: no queue for it
            // (refused as its key, which `--enforce` chooses by).
            self.reject(g, txn, who, Reason::QueueFull);
            return RemapStatus::NoRemap;
        }
        if self.store.as_ref().is_some_and(|s| s.exact()) {
            if self.dry_for(who) {
                // Asked of Redis, never waited for (central.rs).
                self.note_name(who);
                crate::central::dry_run(self, g, txn, who);
                return RemapStatus::NoRemap;
            }
            // Decided in Redis at POST_REMAP (central.rs).
            crate::central::remap(self, g, txn, who);
            return RemapStatus::NoRemap;
        }
        // A peered limiter keeps the key's tag (left in KEY_BYTES by client_key).
        // Only a peered limiter needs the key's bytes (its peer tag): the
        // others skip the thread-local access.
        // A key goes to its keyed handle directly (through `Shaped::admit`
        // it cost 14 instructions more a request).
        let admission = match (&self.shaped, who) {
            (Shaped::Keyed(l), Counted::Key(k)) if l.is_peered() => {
                KEY_BYTES.with(|tag| l.admit(k, &tag.borrow()))
            }
            (Shaped::Keyed(l), Counted::Key(k)) => l.admit(k, &[]),
            (shaped, who) => shaped.admit(who, &[]),
        };
        // No hold and wait across entries: a request waits for one entry's
        // slots at most and never while holding another's, so rules that
        // list shared groups in different orders cannot deadlock. Taking a
        // slot while an earlier entry waits is refused before anything is
        // taken; a wait while an earlier slot is held is refused after
        // (dropping the wait gives its queue place and rate token back).
        let admission = match admission {
            Admission::Wait(_) if self.opts.limit.is_some() && earlier.holds => {
                Admission::Reject(rate_limit_core::Refused::QueueFull)
            }
            other => other,
        };
        match admission {
            Admission::Go(permit) => {
                // `admitted` (below) after `active` (Held::new,
                // hold_until_close): a reader that sees the admission sees
                // its slot.
                match holder {
                    Holder::Session(s) => {
                        s.keep(self.limiter_id(), permit.map(|p| Held::new(p, self)));
                        // Its streams already waiting in the queue (they
                        // missed the free slot) pass with it.
                        self.resume_session_mates(&s);
                        if self.opts.ratelimit_headers {
                            self.attach(g, txn, Fate::Admitted, None, None, who);
                        }
                    }
                    // Nothing to hold, decorate or charge: no state, no hooks.
                    Holder::Txn if permit.is_none() && !self.needs_response() => {}
                    // Alone on its rule, nothing to decorate: only the slot
                    // to give back at TXN_CLOSE (state.rs).
                    Holder::Txn
                        if !self.needs_response()
                            && !self.chained
                            && !self.followed.load(Ordering::Relaxed) =>
                    {
                        if let Some(p) = permit {
                            self.hold_until_close(g, txn, p);
                        }
                    }
                    Holder::Txn => {
                        if permit.is_some() {
                            self.sample_at_close(txn);
                        }
                        let held = permit.map(|p| Held::new(p, self));
                        self.attach(g, txn, Fate::Admitted, held, None, who);
                    }
                }
                self.live.admit();
            }
            Admission::Wait(w) if self.dry_for(who) => {
                // Nothing waits, so the queue never fills: a rate wait the
                // live queue would have refused is a would-be refusal (its
                // token back, no debt); others spend their token, as the
                // wait would have. No queue place or slot is held.
                if let Err(why) = self.limiter().settle_dry_wait(w) {
                    self.reject(g, txn, who, why.into());
                    return RemapStatus::NoRemap;
                }
                bump(self.metrics.dry_run_queued, 1);
                // `--conntrack`: the connection would have been admitted
                // after its wait; its later requests pass as they would
                // (no slot held) while the dry run lasts, then are checked.
                if let Holder::Session(s) = holder {
                    s.keep_dry(self.limiter_id());
                }
                // Decorated, and (`--count-status`) charged as the live
                // rule would charge it after its wait.
                if self.needs_response() {
                    self.attach(g, txn, Fate::Admitted, None, None, who);
                }
            }
            Admission::Wait(w) => {
                self.note_name(who);
                // Before the state's own close hook (attach), so the sample
                // is taken before the slot it will hold goes back.
                self.sample_at_close(txn);
                let wait = Pending {
                    place: self.place(w.place),
                    since: w.since,
                    rate_delay: w.rate_delay,
                    rate: w.rate,
                    holder,
                    who,
                };
                if self
                    .attach(g, txn, Fate::Waiting, None, Some(wait), who)
                    .is_some()
                {
                    txn.hook(HookId::PostRemap, &g.hooks);
                }
            }
            Admission::Reject(why) => self.refuse(g, txn, who, why),
        }
        RemapStatus::NoRemap
    }
}

struct Hooks;

impl HookHandler for Hooks {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        let Some(g) = GLOBALS.get() else {
            return hook.resume();
        };
        let txn = hook.txn();
        let Some(st) = g.txn.get(txn).and_then(PerTxn::entries) else {
            return hook.resume();
        };
        match hook.id() {
            HookId::PostRemap => {
                // A --store entry's decision (one POST_REMAP per entry).
                let asked = st.chain().find_map(|s| {
                    let base = crate::central::rule_store::TxnCentral::take_pending(
                        &mut s.central.lock(),
                    )?;
                    Some((s.rule.clone(), base, s.who))
                });
                if let Some((rule, base, who)) = asked {
                    return hook.park(move |p| crate::central::ask(rule, p, base, who));
                }
                // One POST_REMAP per waiting entry: each takes the next wait.
                let pending = st
                    .chain()
                    .find_map(|s| s.wait.lock().take().map(|w| (s.rule.clone(), w)));
                let Some((rule, wait)) = pending else {
                    return hook.resume();
                };
                hook.park(move |parked| park(rule, parked, *wait))
            }
            HookId::SendResponseHdr => {
                charge::response(txn, st);
                decorate_response(txn, st);
                hook.resume()
            }
            _ => hook.resume(),
        }
    }
}

/// Retry-After and no-store on refusals (from the entry that refused);
/// RateLimit fields from the first entry that asks for them.
fn decorate_response(txn: Txn<'_>, head: &TxnState) {
    let Some(mut resp) = txn.client_response() else {
        return;
    };
    if let Some(st) = head.chain().find(|s| s.fate() == Fate::Refused) {
        // A block in force (`--block`): no sooner than it ends.
        let blocked = st.rule.limiter().blocked_for(st.who.hash());
        let secs = blocked.map_or(0, |n| n.div_ceil(limits::NANOS_PER_SEC));
        let retry = u64::from(st.rule.opts.retry).max(secs);
        if retry > 0 {
            resp.append("Retry-After", &retry.to_string());
        }
        if !resp.contains("Cache-Control") {
            resp.set("Cache-Control", "no-store");
        }
    }
    if let Some((st, policy)) = head
        .chain()
        .find_map(|s| s.rule.policy.as_ref().map(|p| (s, p)))
    {
        policy.with(st.rule.limiter(), |v| {
            resp.set("RateLimit-Policy", v);
        });
        let (left, quota) = st.rule.shaped.remaining(st.who);
        // A learned limit is not announced (headers/policy.rs).
        let left = left.filter(|_| st.rule.opts.auto.is_none());
        if let Some(v) = headers::remaining(left, quota) {
            resp.set("RateLimit", &v);
        }
    }
}

ats::remap_plugin!(Rule);
