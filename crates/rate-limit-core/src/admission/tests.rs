//! The admission tests, by subject (tests/), and the waiters and limiters
//! they share.

use std::sync::Arc;
use std::time::Duration;

use limits::{Clock, ManualClock, Nanos, Permit, Ticket, Waiter, NANOS_PER_MS, NANOS_PER_SEC};
use parking_lot::Mutex;
use proptest::prelude::*;

use super::limiter::Scope;
use super::*;

/// A waiter that keeps the permit it is given in a shared list (or declines).
struct W {
    id: usize,
    held: Held,
    decline: bool,
}

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.decline {
            return Err(permit);
        }
        self.held.lock().push((self.id, permit));
        Ok(())
    }
}

type Held = Arc<Mutex<Vec<(usize, Permit<W>)>>>;

/// A served wait keeps its rate token.
fn spend<C: limits::Clock>(token: Option<RateToken<W, C>>) {
    if let Some(t) = token {
        t.spend();
    }
}

fn limiter(limits: Limits) -> (Arc<Limiter<W, Arc<ManualClock>>>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    (Limiter::new(limits, clock.clone()), clock)
}

fn lim(limit: Option<u32>, rate: Option<(f64, u32)>, queue: u32, maxage_ms: u64) -> Limits {
    Limits {
        limit,
        rate,
        queue,
        maxage: (maxage_ms > 0).then_some(maxage_ms * NANOS_PER_MS),
        block: None,
        auto: None,
    }
}

fn w(id: usize, held: &Held) -> W {
    W {
        id,
        held: held.clone(),
        decline: false,
    }
}

/// Queues `n` waiters (ids from `first`) on the limiter's slots (of `key`).
fn queue_waiters(
    l: &Arc<Limiter<W, Arc<ManualClock>>>,
    key: Option<u64>,
    first: usize,
    n: usize,
    held: &Held,
) -> Vec<Ticket<W>> {
    (first..first + n)
        .map(|i| {
            let Admission::Wait(wait) = l.admit_in_scope(key, &[]) else {
                panic!("request {i} must wait")
            };
            let SlotWait::Queued { ticket, .. } = l.wait_for_slot(wait.since, w(i, held), key)
            else {
                panic!("request {i} must queue")
            };
            std::mem::forget(wait.place);
            ticket
        })
        .collect()
}

mod keyed;
mod reconfigure;
mod rule;
mod shaped;
mod top;
