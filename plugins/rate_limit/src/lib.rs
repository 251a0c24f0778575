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
//! 3. SEND_RESPONSE_HDR (refused, or `--ratelimit-headers`): `Retry-After`,
//!    `Cache-Control: no-store`, RateLimit fields.
//! 4. TXN_CLOSE / SSN_CLOSE: dropping the state drops the permit, which frees
//!    the slot and admits the next waiter.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ats::sched::{Pool, Timer};
use ats::stats::Stat;
use ats::{
    Done, HomeTxn, Hook, HookCont, HookHandler, HookId, Parked, RemapArgs, RemapPlugin,
    RemapRequest, RemapStatus, SsnSlot, Txn, TxnSlot,
};
use limits::{BudgetToken, MonotonicClock, Nanos, Permit, Waiter, NANOS_PER_MS};
use parking_lot::Mutex;
use rate_limit_core::{headers, metric_name, Admission, Limiter, Limits, Options, SlotWait};

type RateToken = rate_limit_core::RateToken<Queued>;

/// How often a rule with waiters looks for waiters whose client left, and
/// how many (oldest first) one look checks: a syscall each.
const WATCH_EVERY: Duration = Duration::from_secs(1);
const WATCH_MAX: usize = 10_000;

/// Process-wide objects, created once in `init`.
struct Globals {
    hooks: HookCont,
    txn: TxnSlot<TxnState>,
    ssn: SsnSlot<Arc<SessionSlots>>,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// A rule's metrics; one that could not be created is skipped (and logged).
struct Metrics {
    queued: Option<Stat>,
    rejected: Option<Stat>,
    expired: Option<Stat>,
    resumed: Option<Stat>,
    admitted: Option<Stat>,
    abandoned: Option<Stat>,
    active: Option<Stat>,
    waiting: Option<Stat>,
}

fn bump(stat: Option<Stat>, n: i64) {
    if let Some(s) = stat {
        s.add(n);
    }
}

impl Metrics {
    fn new(o: &Options) -> Metrics {
        let make = |m: &str| match Stat::find_or_create(&metric_name(&o.prefix, &o.tag, m)) {
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
        }
    }
}

/// A held slot, counted in the `active` gauge.
struct Held {
    _permit: Permit<Queued>,
    gauge: Option<Stat>,
}

impl Held {
    fn new(permit: Permit<Queued>, rule: &Rule) -> Held {
        bump(rule.metrics.active, 1);
        Held {
            _permit: permit,
            gauge: rule.metrics.active,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        bump(self.gauge, -1);
    }
}

/// A queue place, counted in the `waiting` gauge.
struct Place {
    _token: BudgetToken,
    gauge: Option<Stat>,
}

impl Drop for Place {
    fn drop(&mut self) {
        bump(self.gauge, -1);
    }
}

/// What happened to a transaction, for its response headers.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Outcome {
    Admitted = 0,
    Waiting = 1,
    Resumed = 2,
    Refused = 3,
}

/// Per-transaction state; dropped at TXN_CLOSE, which releases the slot.
struct TxnState {
    rule: Arc<Rule>,
    outcome: AtomicU8,
    /// Slot held by this transaction (not with `--conntrack`).
    held: Mutex<Option<Held>>,
    /// Set in DoRemap when the transaction must wait; taken at POST_REMAP.
    wait: Mutex<Option<Wait>>,
}

impl TxnState {
    fn outcome(&self) -> Outcome {
        match self.outcome.load(Ordering::Acquire) {
            1 => Outcome::Waiting,
            2 => Outcome::Resumed,
            3 => Outcome::Refused,
            _ => Outcome::Admitted,
        }
    }

    fn set_outcome(&self, o: Outcome) {
        self.outcome.store(o as u8, Ordering::Release);
    }
}

/// A wait decided in DoRemap. If the transaction never reaches POST_REMAP
/// (another plugin ends it), dropping this with its state gives the queue
/// place and the rate token back.
struct Wait {
    place: Place,
    since: Nanos,
    /// Time to wait for the rate bucket (the token is already reserved).
    rate_delay: Nanos,
    rate: Option<RateToken>,
    home: Home,
}

/// Where a slot goes once admitted.
enum Home {
    Txn,
    Session(Arc<SessionSlots>),
}

/// Slots held by a client session (`--conntrack`), released at SSN_CLOSE.
#[derive(Default)]
struct SessionSlots {
    held: Mutex<Vec<(usize, Option<Held>)>>,
}

impl SessionSlots {
    fn admitted(&self, rule: usize) -> bool {
        self.held.lock().iter().any(|(r, _)| *r == rule)
    }

    fn keep(&self, rule: usize, held: Option<Held>) {
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
}

pub struct Rule {
    opts: Options,
    /// Identifies the rule in session state.
    id: usize,
    limiter: Arc<Limiter<Queued>>,
    metrics: Metrics,
    policy_header: Option<String>,
    warned_chained: AtomicBool,
    /// A check for departed waiters is armed (only while anyone waits).
    watching: AtomicBool,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

impl Rule {
    fn new(args: &RemapArgs<'_>) -> Result<Rule, String> {
        let opts = Options::parse(args.from_url, args.options()).map_err(|e| e.to_string())?;
        let policy_header = if opts.ratelimit_headers {
            headers::policy(opts.limit, opts.rate.map(|r| (r, opts.burst)))
        } else {
            None
        };
        Ok(Rule {
            metrics: Metrics::new(&opts),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limiter: Limiter::new(Limits::of(&opts), MonotonicClock),
            policy_header,
            opts,
            warned_chained: AtomicBool::new(false),
            watching: AtomicBool::new(false),
        })
    }

    /// A queue place, counted in the `waiting` gauge.
    fn place(&self, token: BudgetToken) -> Place {
        bump(self.metrics.waiting, 1);
        Place {
            _token: token,
            gauge: self.metrics.waiting,
        }
    }

    /// After any rate delay: take a slot or join the FIFO (with a --maxage
    /// timer on the transaction's thread).
    fn wait_for_slot(self: &Arc<Self>, q: Queued) {
        let home = q.parked.home();
        let expiry = q.expiry.clone();
        let (ticket, expires_in) = match self.limiter.wait_for_slot(q.since, q) {
            SlotWait::Go(q) => return q.resume(None),
            SlotWait::Expired(q) => return q.expire(),
            SlotWait::Queued { ticket, expires_in } => (Arc::new(ticket), expires_in),
        };
        if !ticket.is_waiting() {
            return;
        }
        self.watch_queue();
        let Some(expires_in) = expires_in else { return };
        let t = ticket.clone();
        let timer = Timer::after(Duration::from_nanos(expires_in), home, move || {
            if let Some(q) = t.cancel() {
                q.expire();
            }
        });
        match timer {
            Ok(timer) => {
                let timer = expiry.get_or_init(|| timer);
                // Admitted while the timer was being armed: nothing left to expire.
                if !ticket.is_waiting() {
                    timer.cancel();
                }
            }
            Err(e) => log::error!("cannot arm the --maxage timer: {e}"),
        }
    }

    /// While anyone waits, looks every second for waiters whose client left,
    /// so they give their queue place back before their turn comes. Armed on
    /// demand: a rule with an empty queue has no timer.
    fn watch_queue(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let rule = self.clone();
        // On a task thread: the look is a syscall per waiter.
        if let Err(e) = Timer::after(WATCH_EVERY, Pool::Task, move || rule.drop_departed()) {
            self.watching.store(false, Ordering::Release);
            log::error!("cannot arm the queue watch: {e}");
        }
    }

    fn drop_departed(self: &Arc<Self>) {
        for q in self
            .limiter
            .remove_departed(WATCH_MAX, |q| q.parked.client_gone())
        {
            q.abandon();
        }
        self.watching.store(false, Ordering::Release);
        if self.limiter.slots().is_some_and(|s| s.waiting() > 0) {
            self.watch_queue();
        }
    }

    /// Stores the transaction's state and hooks what its outcome needs.
    /// `None` if another rate_limit instance in the same remap chain already
    /// owns the state: this one then cannot track the transaction (logged).
    fn attach<'t>(
        self: &Arc<Self>,
        g: &Globals,
        txn: Txn<'t>,
        outcome: Outcome,
        held: Option<Held>,
        wait: Option<Wait>,
    ) -> Option<&'t TxnState> {
        let state = TxnState {
            rule: self.clone(),
            outcome: AtomicU8::new(outcome as u8),
            held: Mutex::new(held),
            wait: Mutex::new(wait),
        };
        if g.txn.set(txn, state).is_err() {
            if !self.warned_chained.swap(true, Ordering::Relaxed) {
                log::error!(
                    "rate_limit.so is listed twice on one remap rule: only the first instance limits it; \
                     combine the options (e.g. --limit and --rate) into one @plugin"
                );
            }
            return None;
        }
        if outcome != Outcome::Admitted || self.opts.ratelimit_headers {
            txn.hook(HookId::SendResponseHdr, &g.hooks);
        }
        g.txn.get(txn)
    }
}

/// A transaction waiting (for the rate or a slot); what `Slots` hands a freed slot to.
struct Queued {
    rule: Arc<Rule>,
    parked: Parked,
    since: Nanos,
    home: Home,
    rate: Option<RateToken>,
    expiry: Arc<OnceLock<Timer>>,
    place: Place,
}

impl Waiter for Queued {
    /// May run on any thread (wherever the slot was freed): it only reads
    /// the client socket and keeps the permit; the transaction is touched
    /// on its own thread.
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.parked.client_gone() {
            self.abandon();
            return Err(permit);
        }
        if let Some(t) = self.expiry.get() {
            t.cancel();
        }
        let held = Held::new(permit, &self.rule);
        self.resume(Some(held));
        Ok(())
    }
}

impl Queued {
    /// Continues the transaction, holding `held` (None: the rule has no slots).
    fn resume(self, held: Option<Held>) {
        let Queued {
            rule,
            parked,
            since,
            home,
            rate,
            place,
            ..
        } = self;
        parked.on_home(move |h| {
            if h.client_gone() {
                // ATS saw the client leave: the slot goes to the next waiter.
                drop(held);
                return refuse(h, &rule, since, rate, place, rule.metrics.abandoned);
            }
            note_delay(&h, &rule, since);
            bump(rule.metrics.resumed, 1);
            bump(rule.metrics.admitted, 1);
            if let Some(r) = rate {
                r.spend();
            }
            let st = state(&h);
            if let Some(st) = st {
                st.set_outcome(Outcome::Resumed);
            }
            match &home {
                Home::Session(s) => s.keep(rule.id, held),
                Home::Txn => {
                    if let Some(st) = st {
                        *st.held.lock() = held;
                    }
                }
            }
            drop(place);
            h.resume()
        });
    }

    /// Waited longer than `--maxage`.
    fn expire(self) {
        log::debug!(
            "queued transaction expired after {} ms",
            waited_ms(&self.rule, self.since)
        );
        let counter = self.rule.metrics.expired;
        self.refuse(counter);
    }

    /// The client left while waiting.
    fn abandon(self) {
        log::debug!(
            "client left after {} ms in queue",
            waited_ms(&self.rule, self.since)
        );
        let counter = self.rule.metrics.abandoned;
        self.refuse(counter);
    }

    fn refuse(self, counter: Option<Stat>) {
        if let Some(t) = self.expiry.get() {
            t.cancel();
        }
        let Queued {
            rule,
            parked,
            since,
            rate,
            place,
            ..
        } = self;
        parked.on_home(move |h| refuse(h, &rule, since, rate, place, counter));
    }
}

fn waited_ms(rule: &Rule, since: Nanos) -> u64 {
    rule.limiter.now().saturating_sub(since) / NANOS_PER_MS
}

/// This copy's state of a parked transaction.
fn state<'h>(h: &'h HomeTxn<'_>) -> Option<&'h TxnState> {
    GLOBALS.get().and_then(|g| g.txn.get(h.txn()))
}

/// `--header`: the wait in ms on the client request (for the origin and logs).
fn note_delay(h: &HomeTxn<'_>, rule: &Rule, since: Nanos) {
    if let Some(name) = &rule.opts.header {
        if let Some(mut req) = h.txn().client_request() {
            req.append(name, &waited_ms(rule, since).to_string());
        }
    }
}

/// Answers a waiting transaction with the rule's error, on its own thread.
/// Dropping `rate` gives its token back; dropping `place`, the queue place.
fn refuse(
    h: HomeTxn<'_>,
    rule: &Rule,
    since: Nanos,
    rate: Option<RateToken>,
    place: Place,
    counter: Option<Stat>,
) -> Done {
    bump(counter, 1);
    note_delay(&h, rule, since);
    drop((rate, place));
    if let Some(st) = state(&h) {
        st.set_outcome(Outcome::Refused);
    }
    let status = rule.opts.error;
    // From a hook ATS sends a bare status; give it the same kind of page.
    h.txn().set_error_body(&error_page(status), "text/html");
    h.fail(status)
}

fn error_page(status: u16) -> String {
    let reason = match status {
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Request Refused",
    };
    format!("<HTML>\n<HEAD>\n<TITLE>{reason}</TITLE>\n</HEAD>\n<BODY>\n<H1>{reason}</H1>\n<HR>\n</BODY>\n</HTML>\n")
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

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, _req: &mut RemapRequest<'_>) -> RemapStatus {
        let Some(g) = GLOBALS.get() else {
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
                    if slots.admitted(self.id) {
                        return RemapStatus::NoRemap;
                    }
                    home = Home::Session(slots);
                }
            }
        }
        match self.limiter.admit() {
            Admission::Go(permit) => {
                let held = permit.map(|p| Held::new(p, self));
                bump(self.metrics.admitted, 1);
                match home {
                    Home::Session(s) => {
                        s.keep(self.id, held);
                        if self.opts.ratelimit_headers {
                            self.attach(g, txn, Outcome::Admitted, None, None);
                        }
                    }
                    // Nothing to hold or decorate: no state, no hooks.
                    Home::Txn if held.is_none() && !self.opts.ratelimit_headers => {}
                    Home::Txn => {
                        self.attach(g, txn, Outcome::Admitted, held, None);
                    }
                }
            }
            Admission::Wait(w) => {
                let wait = Wait {
                    place: self.place(w.place),
                    since: w.since,
                    rate_delay: w.rate_delay,
                    rate: w.rate,
                    home,
                };
                if self
                    .attach(g, txn, Outcome::Waiting, None, Some(wait))
                    .is_some()
                {
                    txn.hook(HookId::PostRemap, &g.hooks);
                }
            }
            Admission::Reject => {
                bump(self.metrics.rejected, 1);
                self.attach(g, txn, Outcome::Refused, None, None);
                // Set in remap, the status makes ATS answer with its body-factory
                // page (Cache-Control: no-store), skipping POST_REMAP and the origin.
                txn.set_status(self.opts.error);
            }
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
        let Some(st) = g.txn.get(txn) else {
            return hook.resume();
        };
        match hook.id() {
            HookId::PostRemap => {
                let Some(wait) = st.wait.lock().take() else {
                    return hook.resume();
                };
                let rule = st.rule.clone();
                hook.park(move |parked| park(rule, parked, wait))
            }
            HookId::SendResponseHdr => {
                decorate_response(txn, st);
                hook.resume()
            }
            _ => hook.resume(),
        }
    }
}

/// A parked transaction starts waiting: for the rate bucket first (a timer),
/// then for a slot.
fn park(rule: Arc<Rule>, parked: Parked, wait: Wait) {
    bump(rule.metrics.queued, 1);
    let q = Queued {
        rule: rule.clone(),
        parked,
        since: wait.since,
        home: wait.home,
        rate: wait.rate,
        expiry: Arc::new(OnceLock::new()),
        place: wait.place,
    };
    if wait.rate_delay == 0 {
        rule.wait_for_slot(q);
        return;
    }
    // The timer (on the transaction's thread) owns the waiter; if it cannot
    // be armed the waiter comes back.
    let home = q.parked.home();
    let cell = Arc::new(Mutex::new(Some(q)));
    let in_timer = cell.clone();
    let r = rule.clone();
    let armed = Timer::after(Duration::from_nanos(wait.rate_delay), home, move || {
        let Some(q) = in_timer.lock().take() else {
            return;
        };
        if q.parked.client_gone() {
            q.abandon();
        } else {
            r.wait_for_slot(q);
        }
    });
    if let Err(e) = armed {
        log::error!("cannot arm the rate timer: {e}");
        let q = cell.lock().take();
        if let Some(q) = q {
            rule.wait_for_slot(q);
        }
    }
}

/// Retry-After and no-store on refusals; RateLimit fields when asked.
fn decorate_response(txn: Txn<'_>, st: &TxnState) {
    let rule = &st.rule;
    let Some(mut resp) = txn.client_response() else {
        return;
    };
    if st.outcome() == Outcome::Refused {
        if rule.opts.retry > 0 {
            resp.append("Retry-After", &rule.opts.retry.to_string());
        }
        if !resp.contains("Cache-Control") {
            resp.set("Cache-Control", "no-store");
        }
    }
    if let Some(policy) = &rule.policy_header {
        resp.set("RateLimit-Policy", policy);
        let (left, quota) = rule.limiter.remaining();
        if let Some(v) = headers::remaining(left, quota) {
            resp.set("RateLimit", &v);
        }
    }
}

ats::remap_plugin!(Rule);
