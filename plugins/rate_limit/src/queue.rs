//! Waiting: a parked transaction waits for the rate bucket (a timer on its
//! own thread), then for a slot in the rule's FIFO. Whoever frees a slot
//! hands it over at once (`Waiter::admit`, any thread); everything that
//! touches the transaction (the delay header, the status, the resume) runs
//! on its own thread through `Parked::on_home`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ats::sched::{Pool, Timer};
use ats::stats::Stat;
use ats::{Done, HomeTxn, Parked};
use limits::{Nanos, Permit, Waiter, NANOS_PER_MS};
use parking_lot::Mutex;
use rate_limit_core::Counted;
use rate_limit_core::SlotWait;

use crate::metrics::bump;
use crate::rule::{Rule, GLOBALS};
use crate::state::{Fate, Held, Holder, Pending, Place, SessionSlots, TxnState};
use rate_limit_core::refusal_log::Reason;

pub(crate) type RateToken = rate_limit_core::RateToken<Queued>;

/// How often a rule with waiters looks for waiters whose client left, and
/// how many (oldest first) one look checks: a syscall each.
const WATCH_EVERY: Duration = Duration::from_secs(1);
const WATCH_MAX: usize = 10_000;

/// A parked transaction starts waiting: for the rate bucket first (a timer),
/// then for a slot.
pub(crate) fn park(rule: Arc<Rule>, parked: Parked, wait: Pending) {
    bump(rule.metrics.queued, 1);
    let q = Queued {
        rule: rule.clone(),
        parked,
        since: wait.since,
        holder: wait.holder,
        rate: wait.rate,
        expiry: Arc::new(OnceLock::new()),
        place: wait.place,
        who: wait.who,
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

impl Rule {
    /// After any rate delay: take a slot or join the FIFO (with a --maxage
    /// timer on the transaction's thread).
    pub(crate) fn wait_for_slot(self: &Arc<Self>, q: Queued) {
        let home = q.parked.home();
        let expiry = q.expiry.clone();
        let who = q.who;
        // --conntrack: a stream of a session that got its slot while this
        // one was in DoRemap or its rate wait passes with the session.
        let session = match &q.holder {
            Holder::Session(s) => Some(s.clone()),
            Holder::Txn => None,
        };
        if session
            .as_ref()
            .is_some_and(|s| s.admitted(self.limiter_id()))
        {
            return q.join_session();
        }
        let (ticket, expires_in) = match self.shaped.wait_for_slot(q.since, q, who) {
            SlotWait::Go(q) => return q.resume(None),
            SlotWait::Expired(q) => return q.expire(),
            // Its flow is over its share (`--flow-over=reject`) or has its
            // part of the queue: refused like a request refused in remap.
            SlotWait::Refused(q) => {
                let counter = q.rule.metrics.rejected;
                return q.refuse(counter, Some(Reason::FlowOver));
            }
            SlotWait::Queued { ticket, expires_in } => (Arc::new(ticket), expires_in),
        };
        if !ticket.is_waiting() {
            return;
        }
        if let Some(s) = session {
            // Noted, then checked again: the session's slot was kept either
            // before this check (seen here) or after the note, and then its
            // sweep (`resume_session_mates`) finds this waiter. Not noted (the
            // session has too many) and kept after the check: it waits its
            // turn, then passes.
            let id = self.limiter_id();
            s.add_waiting(id, &ticket);
            if s.admitted(id) {
                if let Some(q) = ticket.cancel() {
                    return q.join_session();
                }
            }
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
    pub(crate) fn watch_queue(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let rule = self.clone();
        // On the net pool: a request arms it, and ET_TASK may not exist yet
        // (see `ats::sched::Pool::Task`). The look is a non-blocking peek
        // per waiter, at most WATCH_MAX (~10 ms) a second.
        if let Err(e) = Timer::after(WATCH_EVERY, Pool::Net, move || rule.drop_departed()) {
            self.watching.store(false, Ordering::Release);
            log::error!("cannot arm the queue watch: {e}");
        }
    }

    /// --conntrack: session `s` just kept its slot; its other streams
    /// (HTTP/2) waiting on this limiter leave the queue and pass with it,
    /// each resumed on its own thread. O(the session's waiters): nothing
    /// for a connection without any (HTTP/1.1).
    pub(crate) fn resume_session_mates(&self, s: &SessionSlots) {
        for q in s.take_waiting(self.limiter_id()) {
            q.join_session();
        }
    }

    pub(crate) fn drop_departed(self: &Arc<Self>) {
        let (departed, left) = self
            .limiter()
            .remove_departed(WATCH_MAX, |q| q.parked.client_gone());
        for q in departed {
            q.abandon();
        }
        self.watching.store(false, Ordering::Release);
        if left > 0 {
            self.watch_queue();
        }
    }
}

/// A transaction waiting (for the rate or a slot); what `Slots` hands a freed slot to.
pub(crate) struct Queued {
    pub(crate) rule: Arc<Rule>,
    pub(crate) parked: Parked,
    pub(crate) since: Nanos,
    pub(crate) holder: Holder,
    pub(crate) rate: Option<RateToken>,
    pub(crate) expiry: Arc<OnceLock<Timer>>,
    pub(crate) place: Place,
    pub(crate) who: Counted,
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
    pub(crate) fn resume(self, held: Option<Held>) {
        self.go(held, false);
    }

    /// --conntrack: passes because its session holds the slot (another of
    /// its streams waited for it). Like the session's later transactions it
    /// takes nothing: its rate token goes back.
    pub(crate) fn join_session(self) {
        if let Some(t) = self.expiry.get() {
            t.cancel();
        }
        self.go(None, true);
    }

    fn go(self, held: Option<Held>, joined: bool) {
        let Queued {
            rule,
            parked,
            since,
            holder,
            rate,
            place,
            ..
        } = self;
        parked.on_home(move |h| {
            if h.client_gone() {
                // ATS saw the client leave: the slot goes to the next waiter.
                drop(held);
                return refuse(h, &rule, since, rate, place, rule.metrics.abandoned, None);
            }
            note_delay(&h, &rule, since);
            bump(rule.metrics.resumed, 1);
            rule.live.admit();
            if let Some(r) = rate.filter(|_| !joined) {
                r.spend();
            }
            let st = state(&h, &rule);
            if let Some(st) = st {
                st.set_fate(Fate::Resumed);
            }
            let mut mates = None;
            match holder {
                Holder::Session(s) => {
                    if held.is_some() {
                        mates = Some(s.clone());
                    }
                    s.keep(rule.limiter_id(), held);
                }
                Holder::Txn => {
                    // Sampled by the hook added when it began to wait (lib.rs).
                    if let Some(st) = st {
                        *st.held.lock() = held;
                    }
                }
            }
            drop(place);
            let done = h.resume();
            if let Some(s) = mates {
                rule.resume_session_mates(&s);
            }
            done
        });
    }

    /// Waited longer than `--maxage`.
    pub(crate) fn expire(self) {
        log::debug!(
            "queued transaction expired after {} ms",
            waited_ms(&self.rule, self.since)
        );
        let counter = self.rule.metrics.expired;
        self.refuse(counter, Some(Reason::Maxage));
    }

    /// The client left while waiting.
    pub(crate) fn abandon(self) {
        log::debug!(
            "client left after {} ms in queue",
            waited_ms(&self.rule, self.since)
        );
        let counter = self.rule.metrics.abandoned;
        self.refuse(counter, None);
    }

    /// Answers the waiter with the rule's error; `why` (not for a client
    /// that left) goes to the refusal log.
    pub(crate) fn refuse(self, counter: Option<Stat>, why: Option<Reason>) {
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
        parked.on_home(move |h| refuse(h, &rule, since, rate, place, counter, why));
    }
}

pub(crate) fn waited_ms(rule: &Rule, since: Nanos) -> u64 {
    rule.limiter().now().saturating_sub(since) / NANOS_PER_MS
}

/// `rule`'s state on a parked transaction.
pub(crate) fn state<'h>(h: &'h HomeTxn<'_>, rule: &Rule) -> Option<&'h TxnState> {
    GLOBALS.get()?.txn.get(h.txn())?.entries()?.of(rule)
}

/// `--header`: the wait in ms on the client request (for the origin and logs).
pub(crate) fn note_delay(h: &HomeTxn<'_>, rule: &Rule, since: Nanos) {
    if let Some(name) = &rule.opts.header {
        if let Some(mut req) = h.txn().client_request() {
            req.append(name, &waited_ms(rule, since).to_string());
        }
    }
}

/// Answers a waiting transaction with the rule's error, on its own thread.
/// Dropping `rate` gives its token back; dropping `place`, the queue place.
pub(crate) fn refuse(
    h: HomeTxn<'_>,
    rule: &Rule,
    since: Nanos,
    rate: Option<RateToken>,
    place: Place,
    counter: Option<Stat>,
    why: Option<Reason>,
) -> Done {
    bump(counter, 1);
    if let Some(why) = why {
        let who = state(&h, rule).map_or(Counted::Rule, |st| st.who);
        rule.record_refusal(h.txn(), who, why, waited_ms(rule, since), false);
    }
    note_delay(&h, rule, since);
    drop((rate, place));
    if let Some(st) = state(&h, rule) {
        st.set_fate(Fate::Refused);
    }
    let status = rule.opts.error;
    // From a hook ATS sends a bare status; give it the same kind of page.
    h.txn().set_error_body(&error_page(status), "text/html");
    h.fail(status)
}

pub(crate) fn error_page(status: u16) -> String {
    ats::error_page(status)
}
