//! Parked handshakes: a wait for the selector's rate (a timer on the
//! connection's thread), then for a slot in its FIFO. Whoever frees a slot
//! hands it over at once (`Waiter::admit`, any thread); the connection is
//! re-enabled on its own thread (`ParkedHello::on_home`). One deadline,
//! armed when the handshake parks, fails it at `max-age` (or before
//! Traffic Server's own handshake timeout), wherever it is waiting.

use std::sync::Arc;
use std::time::Duration;

use ats::sched::Timer;
use ats::{ClientHello, Done, HomeHello, ParkedHello};
use limits::{BudgetToken, Nanos, Permit, Ticket, Waiter};
use parking_lot::Mutex;
use rate_limit_core::SlotWait;
use sni_limit::{NoWait, Pending, Refusal};

use super::{ConnHold, Sel};

type RateToken = rate_limit_core::RateToken<Waiting>;

/// A parked handshake waiting (for the rate or a slot): what the
/// selector's slots hand a freed slot to.
pub(crate) struct Waiting {
    sel: Arc<Sel>,
    parked: ParkedHello,
    since: Nanos,
    rate: Option<RateToken>,
    per_ip: Option<Permit<NoWait>>,
    /// Shared with the deadline, which takes the waiter out of the FIFO.
    cell: Arc<Cell>,
    _place: BudgetToken,
}

/// What the waiter and its deadline share; dropped with the last of them.
struct Cell {
    ticket: Mutex<Option<Ticket<Waiting>>>,
    sel: Arc<Sel>,
}

impl Drop for Cell {
    fn drop(&mut self) {
        self.sel.count_down_waiting();
    }
}

/// Parks a handshake the selector says must wait.
pub(crate) fn park(sel: Arc<Sel>, hello: ClientHello<'_>, pending: Pending<Waiting>) -> Done {
    sel.count(|m| m.queued);
    sel.count_up_waiting();
    let (wait, per_ip) = pending.into_parts();
    let cell = Arc::new(Cell {
        ticket: Mutex::new(None),
        sel: sel.clone(),
    });
    let max_age = sel
        .core
        .conf()
        .queue
        .and_then(|q| q.max_age)
        .map(|s| Duration::from_secs(u64::from(s)));
    let at_deadline = {
        let cell = cell.clone();
        move |h: HomeHello<'_>| {
            // Out of the FIFO if it is there (a slot granted meanwhile goes
            // to the next waiter: the grant finds the handshake resolved).
            let queued = cell.ticket.lock().take();
            drop(queued.and_then(|t| t.cancel()));
            cell.sel.core.counts.refuse(Refusal::Expired);
            cell.sel.refused(Refusal::Expired);
            drop(cell);
            h.refuse()
        }
    };
    hello.park(max_age, at_deadline, move |parked| {
        let w = Waiting {
            sel: sel.clone(),
            parked,
            since: wait.since,
            rate: wait.rate,
            per_ip,
            cell,
            _place: wait.place,
        };
        if wait.rate_delay == 0 {
            return w.wait_for_slot();
        }
        let Some(home) = w.parked.home() else { return };
        let slot = Arc::new(Mutex::new(Some(w)));
        let in_timer = slot.clone();
        let armed = Timer::after(Duration::from_nanos(wait.rate_delay), home, move || {
            // Taken out first: no lock is held while it joins the FIFO.
            let w = in_timer.lock().take();
            if let Some(w) = w {
                w.wait_for_slot();
            }
        });
        if let Err(e) = armed {
            log::error!("global: cannot arm the rate timer: {e}");
            let w = slot.lock().take();
            if let Some(w) = w {
                w.wait_for_slot();
            }
        }
    })
}

impl Waiting {
    /// After any rate wait: go (no limit), or join the FIFO.
    fn wait_for_slot(self) {
        if self.parked.resolved() {
            return; // its deadline passed during the rate wait
        }
        let Some(limiter) = self.sel.core.limiter().cloned() else {
            return self.go(None);
        };
        let cell = self.cell.clone();
        match limiter.wait_for_slot(self.since, self) {
            SlotWait::Go(w) => w.go(None),
            SlotWait::Expired(w) => w.refuse(Refusal::Expired),
            // Fair flows only: a selector's slots are plain.
            SlotWait::Refused(w) => w.refuse(Refusal::Full),
            SlotWait::Queued { ticket, .. } => {
                if ticket.is_waiting() {
                    *cell.ticket.lock() = Some(ticket);
                }
            }
        }
    }

    /// Resumes the handshake holding `slot` (and its `per-ip` slot), on
    /// its own thread.
    fn go(self, slot: Option<Permit<Waiting>>) {
        let Waiting {
            sel,
            parked,
            rate,
            per_ip,
            cell,
            _place,
            ..
        } = self;
        parked.on_home(move |h| {
            if let Some(r) = rate {
                r.spend();
            }
            let hold = ConnHold::new(sel.core.hold(slot, per_ip), &sel);
            super::keep(h.vconn(), hold);
            sel.count(|m| m.resumed);
            drop((cell, _place));
            h.resume()
        });
    }

    /// Fails the handshake after its wait (on its own thread).
    fn refuse(self, why: Refusal) {
        self.sel.core.counts.refuse(why);
        self.sel.refused(why);
        let Waiting { parked, cell, .. } = self;
        parked.on_home(move |h| {
            drop(cell);
            h.refuse()
        });
    }

    /// The client gave up while parked: its handshake fails (it is gone).
    fn abandon(self) {
        self.sel
            .core
            .counts
            .abandoned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sel.count(|m| m.abandoned);
        let Waiting { parked, cell, .. } = self;
        parked.on_home(move |h| {
            drop(cell);
            h.refuse()
        });
    }
}

impl Waiter for Waiting {
    /// May run on any thread (wherever a connection closed): it only peeks
    /// at the client's socket and keeps the permit.
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.parked.resolved() {
            return Err(permit);
        }
        if self.parked.client_gone() {
            self.abandon();
            return Err(permit);
        }
        self.go(Some(permit));
        Ok(())
    }
}
