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
//!    or failed by a `--maxage` timer.
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
    Done, Hook, HookCont, HookHandler, HookId, Parked, RemapArgs, RemapPlugin, RemapRequest,
    RemapStatus, SsnSlot, Txn, TxnSlot,
};
use limits::{
    Budget, BudgetToken, Clock, Gcra, MonotonicClock, Nanos, Permit, Reservation, Slots, Waiter,
    NANOS_PER_MS,
};
use parking_lot::Mutex;
use rate_limit_core::{headers, metric_name, Options};

static CLOCK: MonotonicClock = MonotonicClock;

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

impl Drop for TxnState {
    fn drop(&mut self) {
        // The transaction never reached POST_REMAP (another plugin ended it):
        // give back the rate token its wait had reserved.
        if self.wait.get_mut().as_ref().is_some_and(|w| w.rate_taken) {
            self.rule.refund_rate();
        }
    }
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

/// A wait decided in DoRemap.
struct Wait {
    place: Place,
    since: Nanos,
    /// Time to wait for the rate bucket (the token is already reserved).
    rate_delay: Nanos,
    /// A rate token was taken (given back if the transaction is not served).
    rate_taken: bool,
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
    slots: Option<Arc<Slots<Queued>>>,
    bucket: Option<Gcra>,
    budget: Arc<Budget>,
    metrics: Metrics,
    policy_header: Option<String>,
    warned_chained: AtomicBool,
    /// A check for departed waiters is armed (only while anyone waits).
    watching: AtomicBool,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// DoRemap's decision.
enum Admission {
    /// Go on; holds a slot if the rule has a concurrency limit.
    Go(Option<Held>),
    /// Wait (for the rate, then for a slot).
    Wait {
        place: Place,
        rate_delay: Nanos,
        rate_taken: bool,
    },
    Reject,
}

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
            slots: opts.limit.map(Slots::new),
            bucket: opts.rate.map(|r| Gcra::per_second(r, opts.burst)),
            budget: Budget::new(opts.queue),
            policy_header,
            opts,
            warned_chained: AtomicBool::new(false),
            watching: AtomicBool::new(false),
        })
    }

    fn place(&self) -> Option<Place> {
        let token = self.budget.try_take()?;
        bump(self.metrics.waiting, 1);
        Some(Place {
            _token: token,
            gauge: self.metrics.waiting,
        })
    }

    fn refund_rate(&self) {
        if let Some(b) = &self.bucket {
            b.refund(CLOCK.now());
        }
    }

    fn admit_now(&self) -> Admission {
        let mut place = None;
        if let Some(bucket) = &self.bucket {
            let now = CLOCK.now();
            if let Reservation::Denied(wait) = bucket.reserve(now, None) {
                // Over the rate: wait if a queue place is free and --maxage allows the wait.
                let max_wait = self.opts.maxage_nanos().unwrap_or(Nanos::MAX);
                if wait > max_wait {
                    return Admission::Reject;
                }
                let Some(p) = self.place() else {
                    return Admission::Reject;
                };
                match bucket.reserve(now, Some(max_wait)) {
                    Reservation::Now => place = Some(p),
                    Reservation::After(delay) => {
                        return Admission::Wait {
                            place: p,
                            rate_delay: delay,
                            rate_taken: true,
                        };
                    }
                    Reservation::Denied(_) => return Admission::Reject,
                }
            }
        }
        let rate_taken = self.bucket.is_some();
        let Some(slots) = &self.slots else {
            return Admission::Go(None);
        };
        if let Some(permit) = slots.try_acquire() {
            return Admission::Go(Some(Held::new(permit, self)));
        }
        match place.or_else(|| self.place()) {
            Some(place) => Admission::Wait {
                place,
                rate_delay: 0,
                rate_taken,
            },
            None => {
                if rate_taken {
                    self.refund_rate();
                }
                Admission::Reject
            }
        }
    }

    /// After any rate delay: take a slot or join the FIFO (with a --maxage timer).
    fn wait_for_slot(self: &Arc<Self>, q: Queued) {
        let Some(slots) = &self.slots else {
            q.resume(None);
            return;
        };
        let deadline = self.opts.maxage_nanos().map(|m| q.since.saturating_add(m));
        let now = CLOCK.now();
        if deadline.is_some_and(|d| d <= now) {
            q.expire();
            return;
        }
        let expiry = q.expiry.clone();
        let ticket = Arc::new(slots.enqueue(q));
        if !ticket.is_waiting() {
            return;
        }
        self.watch_queue();
        let Some(deadline) = deadline else { return };
        let t = ticket.clone();
        let timer = Timer::after(Duration::from_nanos(deadline - now), Pool::Net, move || {
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
        let Some(slots) = &self.slots else { return };
        let mut checked = 0;
        let departed = slots.remove_waiting(|q| {
            checked += 1;
            checked <= WATCH_MAX && q.parked.client_gone()
        });
        for q in departed {
            q.abandon();
        }
        self.watching.store(false, Ordering::Release);
        if slots.waiting() > 0 {
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
    rate_taken: bool,
    expiry: Arc<OnceLock<Timer>>,
    _place: Place,
}

impl Waiter for Queued {
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
    fn waited_ms(&self) -> u64 {
        CLOCK.now().saturating_sub(self.since) / NANOS_PER_MS
    }

    /// `--header`: the wait in ms on the client request (for the origin and logs).
    fn note_delay(&self) {
        if let Some(name) = &self.rule.opts.header {
            if let Some(mut req) = self.parked.txn().client_request() {
                req.append(name, &self.waited_ms().to_string());
            }
        }
    }

    fn state(&self) -> Option<&TxnState> {
        GLOBALS.get().and_then(|g| g.txn.get(self.parked.txn()))
    }

    /// Continues the transaction, holding `held` (None: the rule has no slots).
    fn resume(self, held: Option<Held>) {
        self.note_delay();
        bump(self.rule.metrics.resumed, 1);
        bump(self.rule.metrics.admitted, 1);
        if let Some(st) = self.state() {
            st.set_outcome(Outcome::Resumed);
        }
        match &self.home {
            Home::Session(s) => s.keep(self.rule.id, held),
            Home::Txn => {
                if let Some(st) = self.state() {
                    *st.held.lock() = held;
                }
            }
        }
        self.parked.resume();
    }

    /// Waited longer than `--maxage`.
    fn expire(self) {
        bump(self.rule.metrics.expired, 1);
        log::debug!("queued transaction expired after {} ms", self.waited_ms());
        self.refuse();
    }

    /// The client left while waiting.
    fn abandon(self) {
        bump(self.rule.metrics.abandoned, 1);
        log::debug!("client left after {} ms in queue", self.waited_ms());
        self.refuse();
    }

    fn refuse(self) {
        if let Some(t) = self.expiry.get() {
            t.cancel();
        }
        self.note_delay();
        if self.rate_taken {
            self.rule.refund_rate();
        }
        if let Some(st) = self.state() {
            st.set_outcome(Outcome::Refused);
        }
        let status = self.rule.opts.error;
        // From a hook ATS sends a bare status; give it the same kind of page.
        self.parked
            .txn()
            .set_error_body(&error_page(status), "text/html");
        self.parked.fail(status);
    }
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
        match self.admit_now() {
            Admission::Go(held) => {
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
            Admission::Wait {
                place,
                rate_delay,
                rate_taken,
            } => {
                let wait = Wait {
                    place,
                    since: CLOCK.now(),
                    rate_delay,
                    rate_taken,
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
        rate_taken: wait.rate_taken,
        expiry: Arc::new(OnceLock::new()),
        _place: wait.place,
    };
    if wait.rate_delay == 0 {
        rule.wait_for_slot(q);
        return;
    }
    // The timer owns the waiter; if it cannot be armed the waiter comes back.
    let cell = Arc::new(Mutex::new(Some(q)));
    let in_timer = cell.clone();
    let r = rule.clone();
    let armed = Timer::after(
        Duration::from_nanos(wait.rate_delay),
        Pool::Net,
        move || {
            let Some(q) = in_timer.lock().take() else {
                return;
            };
            if q.parked.client_gone() {
                q.abandon();
            } else {
                r.wait_for_slot(q);
            }
        },
    );
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
        let left = rule
            .slots
            .as_ref()
            .map(|s| s.limit().saturating_sub(s.active()));
        let quota = rule.bucket.as_ref().map(|b| b.quota(CLOCK.now()));
        if let Some(v) = headers::remaining(left, quota) {
            resp.set("RateLimit", &v);
        }
    }
}

ats::remap_plugin!(Rule);
