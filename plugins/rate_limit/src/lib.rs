//! rate_limit.so: a drop-in for upstream's remap rate limiter.
//!
//! One transaction, top to bottom:
//! 1. `do_remap`: the rate bucket (if `--rate`), then a concurrency slot (if
//!    a limit). Admitted: the slot goes into per-transaction (or, with
//!    `--conntrack`, per-session) state and is released when ATS closes it.
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
//!    waiters, `mates.rs`).
//! 3. SEND_RESPONSE_HDR (refused, or `--ratelimit-headers`): `Retry-After`,
//!    `Cache-Control: no-store`, RateLimit fields.
//! 4. TXN_CLOSE / SSN_CLOSE: dropping the state drops the permit, which frees
//!    the slot and admits the next waiter.
#![forbid(unsafe_code)]

mod charge;
mod ctl;
mod fair;
mod mates;
mod peers;
mod policy;
mod queue;
mod refusals;
mod state;
mod store;

use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use ats::sched::Periodic;
use ats::Header;
use rate_limit_core::key::{Missing, RequestView};

use ats::{
    Done, Hook, HookCont, HookHandler, HookId, ReloadStatus, RemapArgs, RemapPlugin, RemapRequest,
    RemapStatus, SsnSlot, Txn, TxnSlot,
};
use limits::{BudgetToken, MonotonicClock};
use parking_lot::Mutex;
use rate_limit_core::registry::{Change, Registry};
use rate_limit_core::{headers, Admission, Limiter, Limits, Options};

use crate::queue::{park, Queued};
use crate::refusals::Reason;
use crate::state::{
    bump, Held, Home, Metrics, Outcome, PerTxn, Place, SessionSlots, TxnState, Wait,
};

/// Process-wide objects, created once in `init`.
struct Globals {
    hooks: HookCont,
    txn: TxnSlot<PerTxn>,
    ssn: SsnSlot<Arc<SessionSlots>>,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// The limiters of every group and rule, by identity, across reloads: one
/// per loaded copy of the .so (see docs/rate_limit.md, "Groups and reloads").
/// Taken only while loading configurations, never by requests.
static REGISTRY: LazyLock<Mutex<Registry<Limiter<Queued>>>> = LazyLock::new(Mutex::default);

pub struct Rule {
    opts: Options,
    /// Its limiter: its group's, or its own (carried over reloads).
    limiter: Arc<Limiter<Queued>>,
    /// A later rate_limit entry on the same remap rule: the transaction may
    /// already carry an earlier entry's state.
    chained: bool,
    /// A later entry follows this one on the rule (set while the
    /// configuration loads): it will look for this entry's state.
    followed: Arc<AtomicBool>,
    metrics: Metrics,
    /// `active` and `admitted`, published every second.
    live: Arc<state::Live>,
    /// With `--key`: publishes the `keys` gauge and `evicted` counter.
    _key_metrics: Option<Periodic>,
    /// With `--fair`: publishes `flows`, `borrowed` and `flow_rejected`.
    _fair_metrics: Vec<Periodic>,
    /// What `traffic_ctl plugin msg rate_limit` shows of the rule.
    card: Arc<ctl::Card>,
    /// `--ratelimit-headers`: the RateLimit-Policy value, following live changes.
    policy: Option<policy::Policy>,
    /// A check for departed waiters is armed (only while anyone waits).
    watching: AtomicBool,
    /// `--store`: decided in Redis (see store.rs).
    store: Option<crate::store::RuleStore>,
    /// `--peers`: the exchange runs while a rule holds it.
    _peers: Option<Arc<peers::Exchange>>,
    /// `--log`: the refusal log.
    refusals: refusals::Refusals,
}

impl Rule {
    fn new(args: &RemapArgs<'_>) -> Result<Rule, String> {
        let mut opts = Options::parse(args.from_url, args.options()).map_err(|e| e.to_string())?;
        if let Some(f) = opts.fair.as_mut() {
            rate_limit_core::fair::load_weights(f, &ats::config_dir())
                .map_err(|e| e.to_string())?;
        }
        let (from, to) = (args.from_url, args.to_url);
        let (limiter, chained, followed, policy) = {
            let mut reg = REGISTRY.lock();
            let place = reg.place(from, to);
            let followed = reg.followed(from, to);
            let id = Registry::<Limiter<Queued>>::identity(&opts, from, to, place);
            let limiter = reg.join(&id, &opts, from, new_limiter)?;
            // Under the registry lock: no live `set` between the two reads.
            let policy = opts
                .ratelimit_headers
                .then(|| policy::Policy::new(&Limits::of(&opts), limiter.changes()))
                .flatten();
            (limiter, place > 1, followed, policy)
        };
        let peers = peers::join(&opts, &limiter)?;
        let metrics = Metrics::new(&opts);
        let store = crate::store::RuleStore::new(&opts, &limiter)?;
        let live = Arc::new(state::Live::new(&metrics));
        let refusals = refusals::Refusals::new(&opts)?;
        Ok(Rule {
            refusals,
            store,
            live,
            _key_metrics: key_metrics(&limiter, &metrics),
            _fair_metrics: fair::metrics(&limiter, &metrics),
            card: ctl::Card::new(from, &opts, &limiter, metrics),
            metrics,
            limiter,
            chained,
            followed,
            policy,
            opts,
            watching: AtomicBool::new(false),
            _peers: peers,
        })
    }

    /// Identifies the rule's limiter in session state (`--conntrack`): a
    /// connection admitted by one rule of a group, or by the rule before a
    /// reload, is admitted by the others.
    pub(crate) fn limiter_id(&self) -> u64 {
        self.limiter.id()
    }

    /// A queue place, counted in the `waiting` gauge.
    fn place(&self, token: BudgetToken) -> Place {
        bump(self.metrics.waiting, 1);
        Place {
            _token: token,
            gauge: self.metrics.waiting,
        }
    }

    /// The client's key with `--key` (hashed: the table keeps nothing else),
    /// or what the `--key-missing` policy says for a request without one.
    fn client_key(
        &self,
        txn: Txn<'_>,
        req: &RemapRequest<'_>,
        client: Option<Option<IpAddr>>,
    ) -> ClientKey {
        if let Some(flow) = self.flow(txn, req) {
            return ClientKey::Key(flow);
        }
        let (Some(spec), Some(table)) = (&self.opts.key, self.limiter.keys()) else {
            return ClientKey::Rule;
        };
        let view = KeyView {
            txn,
            hdr: req.request_header(),
            client,
        };
        let found = KEY_BYTES.with(|buf| {
            let mut buf = buf.borrow_mut();
            if !spec.key(&view, &mut buf) {
                // Empty: the shared key's peer tag (never exchanged).
                buf.clear();
                return None;
            }
            if self.limiter.is_peered() {
                // Peers (and --store-sync) name keys by their tag: the table hashes that.
                rate_limit_core::peering::to_peer_tag(spec, &mut buf);
            }
            Some(table.hash(&buf))
        });
        match (found, self.opts.key_missing) {
            (Some(k), _) => ClientKey::Key(k),
            // Real keys are never empty (each part has a tag byte).
            (None, Missing::Shared) => ClientKey::Key(table.hash(&[])),
            (None, Missing::Pass) => ClientKey::Pass,
            (None, Missing::Refuse) => ClientKey::Refuse,
        }
    }

    /// Several entries on one rule: what earlier entries left on this
    /// transaction, for the no-hold-and-wait rule (see `do_remap`).
    fn earlier(&self, g: &Globals, txn: Txn<'_>) -> Earlier {
        let head = match g.txn.get(txn) {
            None => return Earlier::default(),
            Some(PerTxn::Held { .. }) => {
                return Earlier {
                    holds: true,
                    ..Earlier::default()
                }
            }
            Some(PerTxn::Entries(head)) => head,
        };
        let slot_wait = |s: &TxnState| s.rule.opts.limit.is_some() && s.wait.lock().is_some();
        // A --conntrack entry keeps its slot in the session, not the transaction.
        let session_holds = || {
            txn.ssn()
                .and_then(|ss| g.ssn.get(ss))
                .is_some_and(|s| s.holds_any())
        };
        Earlier {
            refused: head.refused(),
            waits: head.chain().any(slot_wait),
            holds: head.chain().any(|s| s.held.lock().is_some()) || session_holds(),
        }
    }

    /// Lets `top` show the client's key (just built in `KEY_BYTES`).
    fn note_name(&self, key: Option<u64>) {
        if let Some(k) = key {
            KEY_BYTES.with(|b| {
                if let Ok(b) = b.try_borrow() {
                    self.card.note_name(k, &b);
                }
            });
        }
    }

    /// An admitted request's response matters: RateLimit fields, or
    /// (`--count-status`) its status may charge the rate.
    fn needs_response(&self) -> bool {
        self.opts.ratelimit_headers || self.opts.count_status.is_some()
    }

    /// Refused in remap: ATS answers with its body-factory page
    /// (Cache-Control: no-store), skipping POST_REMAP and the origin. In a
    /// dry run, counted and logged, and the request goes on.
    fn reject(self: &Arc<Self>, g: &Globals, txn: Txn<'_>, key: Option<u64>, why: Reason) {
        self.note_name(key);
        let dry = self.dry_run();
        self.record_refusal(txn, key, why, 0, dry);
        if dry {
            bump(self.metrics.dry_run_refused, 1);
            if self.opts.ratelimit_headers {
                self.attach(g, txn, Outcome::DryRun, None, None, key);
            }
            return;
        }
        bump(self.metrics.rejected, 1);
        self.attach(g, txn, Outcome::Refused, None, None, key);
        txn.set_status(self.opts.error);
    }

    /// In a dry run (`--dry-run`, or `set … dry_run=on`).
    pub(crate) fn dry_run(&self) -> bool {
        self.card.dry_run.load(Ordering::Relaxed)
    }

    /// Records a refusal of `txn` (an expiry, or a dry run's would-be
    /// refusal) in the refusal log, within the rule's line budget. Every
    /// refusal goes through here; metrics are the caller's. On the
    /// transaction's thread.
    pub(crate) fn record_refusal(
        &self,
        txn: Txn<'_>,
        key: Option<u64>,
        reason: Reason,
        waited_ms: u64,
        dry_run: bool,
    ) {
        self.refusals
            .record(reason, waited_ms, dry_run, || refusals::Who {
                client: self.client_ip(txn),
                key: key.map(|k| self.key_name(k)),
            });
    }

    /// [`Rule::record_refusal`] away from the transaction (a `--store`
    /// dry run's reply), with the client's address read before.
    pub(crate) fn record_refusal_of(
        &self,
        client: Option<IpAddr>,
        key: Option<u64>,
        reason: Reason,
        waited_ms: u64,
        dry_run: bool,
    ) {
        self.refusals
            .record(reason, waited_ms, dry_run, || refusals::Who {
                client,
                key: key.map(|k| self.key_name(k)),
            });
    }

    /// A key as `top` shows it, or its hash if its name was not kept.
    fn key_name(&self, k: u64) -> String {
        self.card.name(k).unwrap_or_else(|| format!("#{k:016x}"))
    }

    /// The client's address as `--exempt` (or else `--key=ip`) finds it:
    /// through the trusted proxies, if any.
    pub(crate) fn client_ip(&self, txn: Txn<'_>) -> Option<IpAddr> {
        let view = KeyView {
            txn,
            hdr: txn.client_request(),
            client: None,
        };
        match (&self.opts.exempt, &self.opts.key) {
            (Some(e), _) => e.client_ip(&view),
            (None, Some(k)) => k.client_ip(&view),
            (None, None) => txn.connection_client_ip(),
        }
    }

    /// `--exempt`: `Err` if the client is in an exempt network; else the
    /// client's address as found (`Some`, with `--exempt`), for the key.
    fn exempt(&self, txn: Txn<'_>, req: &RemapRequest<'_>) -> Result<Option<Option<IpAddr>>, ()> {
        let Some(e) = &self.opts.exempt else {
            return Ok(None);
        };
        let view = KeyView {
            txn,
            hdr: req.request_header(),
            client: None,
        };
        let ip = e.client_ip(&view);
        if ip.is_some_and(|ip| e.covers(ip)) {
            return Err(());
        }
        Ok(Some(ip))
    }

    /// Stores the transaction's state (after any earlier rate_limit entry's
    /// on the same rule) and hooks what its outcome needs.
    fn attach<'t>(
        self: &Arc<Self>,
        g: &Globals,
        txn: Txn<'t>,
        outcome: Outcome,
        held: Option<Held>,
        wait: Option<Wait>,
        key: Option<u64>,
    ) -> Option<&'t TxnState> {
        let state = TxnState {
            rule: self.clone(),
            key,
            outcome: AtomicU8::new(outcome as u8),
            held: Mutex::new(held),
            wait: Mutex::new(wait.map(Box::new)),
            next: OnceLock::new(),
            decorating: AtomicBool::new(false),
            store: Mutex::new(None),
        };
        // Only a later entry can find an earlier one's state: the first
        // skips the lookup.
        let earlier = if self.chained { g.txn.get(txn) } else { None };
        let (head, mine) = match earlier {
            // A first entry that keeps only `Held` is never followed, so a
            // later entry finds the entries' states or nothing.
            Some(head) => {
                let head = head.entries()?;
                (head, head.push(state)?)
            }
            None => {
                // Fails only if this copy's state is there already, which a
                // first entry cannot see: then it is not tracked (no slot).
                let head = g.txn.set(txn, PerTxn::Entries(state)).ok()?.entries()?;
                (head, head)
            }
        };
        // `--count-status`: the response's status may charge the rate.
        // A dry run's let-through (`DryRun`) has nothing of its own to add.
        let decorate = !matches!(outcome, Outcome::Admitted | Outcome::DryRun)
            || self.opts.ratelimit_headers
            || self.opts.count_status.is_some();
        if decorate && !head.decorating.swap(true, Ordering::Relaxed) {
            txn.hook(HookId::SendResponseHdr, &g.hooks);
        }
        Some(mine)
    }
}

impl RemapPlugin for Rule {
    const NAME: &'static str = "rate_limit";

    fn init() -> Result<(), String> {
        if GLOBALS.get().is_none() {
            let g = Globals {
                hooks: HookCont::new(Hooks)?,
                txn: TxnSlot::new("rate_limit")?,
                ssn: SsnSlot::new("rate_limit")?,
            };
            let _ = GLOBALS.set(g);
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
        crate::store::done();
    }

    fn post_reload(status: ReloadStatus) {
        let mut reg = REGISTRY.lock();
        if status == ReloadStatus::Failed {
            reg.abort();
            return;
        }
        // Raising a limit admits waiters here: their resumption is scheduled
        // on their own threads, so holding the registry lock is brief.
        let changes = reg.commit(|limiter, o| {
            if let Err(option) = limiter.reconfigure(Limits::of(o)) {
                log::error!("cannot change {option} of a live limiter; restart to apply it");
            }
            if let Some(f) = &o.fair {
                limiter.set_fair(f);
            }
        });
        for c in changes {
            match c {
                Change::Created {
                    id,
                    restarted: Some(option),
                } => log::warn!(
                    "{id}: --{option} changed, which live state cannot follow: its slots, \
                     waiters and buckets start anew (the old rules keep theirs until they end)"
                ),
                Change::Created { .. } => {}
                Change::Changed {
                    id,
                    values,
                    overrode_live,
                } => {
                    let list: Vec<String> = values
                        .iter()
                        .map(|(name, old, new)| format!("--{name} {old} -> {new}"))
                        .collect();
                    let why = if overrode_live {
                        " (remap.config overrides the values set live by traffic_ctl plugin msg)"
                    } else {
                        ""
                    };
                    log::info!("{id}: applied live: {}{why}", list.join(", "));
                }
            }
        }
    }

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, req: &mut RemapRequest<'_>) -> RemapStatus {
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
        let mut home = Home::Txn;
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
                    if slots.admitted(self.limiter_id()) {
                        return RemapStatus::NoRemap;
                    }
                    home = Home::Session(slots);
                }
            }
        }
        if self.opts.limit.is_some() && earlier.waits {
            // It would wait behind an earlier entry's wait: no queue for it.
            self.reject(g, txn, None, Reason::QueueFull);
            return RemapStatus::NoRemap;
        }
        let key = match self.client_key(txn, req, client) {
            ClientKey::Rule => None,
            ClientKey::Key(k) => Some(k),
            ClientKey::Pass => return RemapStatus::NoRemap,
            ClientKey::Refuse => {
                self.reject(g, txn, None, Reason::KeyMissing);
                return RemapStatus::NoRemap;
            }
        };
        if self.store.as_ref().is_some_and(|s| s.exact()) {
            if self.dry_run() {
                // Asked of Redis, never waited for (store.rs).
                self.note_name(key);
                crate::store::dry_run(self, g, txn, key);
                return RemapStatus::NoRemap;
            }
            // Decided in Redis at POST_REMAP (store.rs).
            crate::store::remap(self, g, txn, key);
            return RemapStatus::NoRemap;
        }
        // A peered limiter keeps the key's tag (left in KEY_BYTES by client_key).
        // Only a peered limiter needs the key's bytes (its peer tag): the
        // others skip the thread-local access.
        let admission = if self.limiter.is_peered() {
            KEY_BYTES.with(|tag| self.limiter.admit_tagged(key, &tag.borrow()))
        } else {
            self.limiter.admit_tagged(key, &[])
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
                let held = permit.map(|p| Held::new(p, self));
                self.live.admit();
                match home {
                    Home::Session(s) => {
                        s.keep(self.limiter_id(), held);
                        // Its streams already waiting in the queue (they
                        // missed the free slot) pass with it.
                        self.resume_session_mates(&s);
                        if self.opts.ratelimit_headers {
                            self.attach(g, txn, Outcome::Admitted, None, None, key);
                        }
                    }
                    // Nothing to hold, decorate or charge: no state, no hooks.
                    Home::Txn if held.is_none() && !self.needs_response() => {}
                    // Alone on its rule, nothing to decorate: only the slot
                    // to keep until TXN_CLOSE (if the slot is taken, the
                    // value comes back and dropping it frees the slot).
                    Home::Txn
                        if !self.needs_response()
                            && !self.chained
                            && !self.followed.load(Ordering::Relaxed) =>
                    {
                        if let Some(h) = held {
                            let _ = g.txn.set(txn, PerTxn::Held { _slot: h });
                        }
                    }
                    Home::Txn => {
                        self.attach(g, txn, Outcome::Admitted, held, None, key);
                    }
                }
            }
            Admission::Wait(w) if self.dry_run() => {
                // It would have waited: nothing waits. Its rate token is
                // spent, as the wait would have (its debt stays in the
                // bucket); its queue place and any slot are not held.
                bump(self.metrics.dry_run_queued, 1);
                if let Some(r) = w.rate {
                    r.spend();
                }
                drop(w.place);
                // `--conntrack`: the connection would have been admitted
                // after its wait; its later requests pass as they would
                // (admitted, no slot held).
                if let Home::Session(s) = home {
                    s.keep(self.limiter_id(), None);
                }
                // Decorated, and (`--count-status`) charged as the live
                // rule would charge it after its wait.
                if self.needs_response() {
                    self.attach(g, txn, Outcome::Admitted, None, None, key);
                }
            }
            Admission::Wait(w) => {
                self.note_name(key);
                let wait = Wait {
                    place: self.place(w.place),
                    since: w.since,
                    rate_delay: w.rate_delay,
                    rate: w.rate,
                    home,
                    key,
                };
                if self
                    .attach(g, txn, Outcome::Waiting, None, Some(wait), key)
                    .is_some()
                {
                    txn.hook(HookId::PostRemap, &g.hooks);
                }
            }
            Admission::Reject(why) => self.reject(g, txn, key, why.into()),
        }
        RemapStatus::NoRemap
    }
}

/// What earlier rate_limit entries on the same rule left on a transaction.
#[derive(Default)]
struct Earlier {
    refused: bool,
    /// One waits for a slot (or for its rate, then a slot).
    waits: bool,
    /// A slot is held: by the transaction, or (`--conntrack`) its session.
    holds: bool,
}

/// Whose limits a request is counted against.
enum ClientKey {
    /// The rule's (no `--key`).
    Rule,
    /// Its key's (hashed).
    Key(u64),
    /// None: no key, and `--key-missing=pass`.
    Pass,
    /// No key, and `--key-missing=refuse`.
    Refuse,
}

thread_local! {
    /// Reused for every key built on this thread.
    static KEY_BYTES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A request as `--key` reads it.
struct KeyView<'t> {
    txn: Txn<'t>,
    hdr: Option<Header<'t>>,
    /// The client's address `--exempt` already found (the same trusted
    /// proxies as `--key`'s), so an `ip` key does not walk the header again.
    client: Option<Option<IpAddr>>,
}

impl RequestView for KeyView<'_> {
    /// The connection's client: on a PROXY-protocol port the header's
    /// source, on 10.x as on 9.2 (as ip_throttle reads it).
    fn peer_ip(&self) -> Option<IpAddr> {
        self.txn.connection_client_ip()
    }

    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.hdr.as_ref()?.joined(name)
    }

    fn query(&self) -> Option<Vec<u8>> {
        self.hdr.as_ref()?.url_query()
    }

    fn resolved_client(&self) -> Option<Option<IpAddr>> {
        self.client
    }
}

/// Every second, adds what changed in the key table to the `keys` gauge and
/// the `evicted` counter. Holds the limiter weakly, so a reloaded-away rule
/// stops publishing and takes its keys back out of the shared gauge.
fn key_metrics(limiter: &Arc<Limiter<Queued>>, m: &Metrics) -> Option<Periodic> {
    limiter.keys()?;
    let weak = Arc::downgrade(limiter);
    let read = move || {
        let l = weak.upgrade()?;
        let t = l.keys()?;
        Some((t.len() as i64, t.evicted()))
    };
    match ats::stats::publish_deltas(KEY_METRICS_EVERY, m.keys, m.evicted, read) {
        Ok(p) => Some(p),
        Err(e) => {
            log::error!("cannot start the keys/evicted metrics task: {e}");
            None
        }
    }
}

const KEY_METRICS_EVERY: Duration = Duration::from_secs(1);

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
                    let base = crate::store::TxnStore::take_pending(&mut s.store.lock())?;
                    Some((s.rule.clone(), base, s.key))
                });
                if let Some((rule, base, key)) = asked {
                    return hook.park(move |p| crate::store::ask(rule, p, base, key));
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
    if let Some(st) = head.chain().find(|s| s.outcome() == Outcome::Refused) {
        if st.rule.opts.retry > 0 {
            resp.append("Retry-After", &st.rule.opts.retry.to_string());
        }
        if !resp.contains("Cache-Control") {
            resp.set("Cache-Control", "no-store");
        }
    }
    if let Some((st, policy)) = head
        .chain()
        .find_map(|s| s.rule.policy.as_ref().map(|p| (s, p)))
    {
        policy.with(&st.rule.limiter, |v| {
            resp.set("RateLimit-Policy", v);
        });
        let (left, quota) = st.rule.limiter.remaining(st.key);
        if let Some(v) = headers::remaining(left, quota) {
            resp.set("RateLimit", &v);
        }
    }
}

/// Builds the limiter a rule's options describe (the registry calls it when
/// no live one fits).
fn new_limiter(o: &Options) -> Arc<Limiter<Queued>> {
    let limiter = build_limiter(o);
    if o.count_status.is_some() {
        limiter.set_charge_on_response();
    }
    limiter
}

fn build_limiter(o: &Options) -> Arc<Limiter<Queued>> {
    let limits = Limits::of(o);
    if let Some(f) = &o.fair {
        return Limiter::fair(limits, f, MonotonicClock);
    }
    match o.key {
        // --store-sync exchanges counts as peers do (store/sync.rs).
        Some(_) if o.peer.is_some() || o.store.as_ref().is_some_and(|s| s.sync_ms.is_some()) => {
            let report_tags = o
                .peer
                .as_ref()
                .map_or(store::sync::MAX_KEYS_PER_SYNC, |p| p.max_tags);
            Limiter::peered(limits, o.keys, report_tags, MonotonicClock)
        }
        Some(_) => Limiter::keyed(limits, o.keys, MonotonicClock),
        None => Limiter::new(limits, MonotonicClock),
    }
}

ats::remap_plugin!(Rule);
