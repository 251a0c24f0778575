//! Applying the learned limit to what it governs: rate_limit.so's slots,
//! throttle.so's gate. One path for both plugins: a sample is recorded
//! with the places in use, then the limit in force is applied; a pin is
//! applied until the controller and the places agree.

use std::sync::Arc;

use limits::{Clock, Nanos, Slots, Waiter};

use crate::{Controller, Outcome};

/// The most a learned limit's raise adds to the places per sample
/// ([`Controller::observe`]): an eighth of their limit, at least 1, at
/// most this.
pub const RAISE_STEP: u32 = 16;

/// Places limited by a learned limit.
pub trait Governed {
    /// Places held now: the load the origin met.
    fn in_flight(&self) -> u32;
    /// The limit the places enforce now.
    fn limit(&self) -> u32;
    /// Enforces a new limit (raising it may admit waiters).
    fn set_limit(&self, limit: u32);
}

impl<W: Waiter> Governed for Arc<Slots<W>> {
    #[inline]
    fn in_flight(&self) -> u32 {
        self.active()
    }

    #[inline]
    fn limit(&self) -> u32 {
        Slots::limit(self)
    }

    fn set_limit(&self, limit: u32) {
        Slots::set_limit(self, limit);
    }
}

impl<C: Clock> Controller<C> {
    /// Records one origin transaction of a holder of `places`, called
    /// before its place is given back, and applies the limit in force.
    /// The load it met is the larger of `met` (what the caller knows of
    /// it: the places held once it took its own, or more; 0 if nothing)
    /// and the places held now: a request sent into a crowd, or joined by
    /// one, that ends alone was not unloaded (the close-time count alone
    /// would teach the baseline a loaded RTT). The limit applied is the
    /// controller's, whoever moved it last: a pin racing a window's close,
    /// applied in the other order, is put right by the next sample (one
    /// load and compare when nothing changed).
    ///
    /// A raise reaches the places a step per sample, an eighth of their
    /// limit (1 to [`RAISE_STEP`]): raising admits waiters inside the call
    /// (on the net thread of the transaction that closes), and a probe's
    /// end raises from the minimum back to what it was, so the origin
    /// meets a ramp (about 12 % more a sample) rather than the whole queue
    /// at once, which its latency would show. A fall applies at once.
    #[inline]
    pub fn observe(&self, outcome: Outcome, met: u32, places: &impl Governed) {
        let now = places.limit();
        self.note_enforced(now);
        self.record(outcome, met.max(places.in_flight()));
        let limit = self.limit();
        if now != limit {
            let step = (now / 8).clamp(1, RAISE_STEP);
            places.set_limit(limit.min(now.saturating_add(step)));
        }
    }

    /// [`Controller::pin`] (`Some(N)`: `set … limit=N`; `None`: back to
    /// learning), applied to `places` until they agree with the
    /// controller (a window closing meanwhile moves it once more). The
    /// limit in force.
    pub fn pin_into(&self, limit: Option<u32>, places: &impl Governed) -> u32 {
        let mut now = self.pin(limit);
        for _ in 0..3 {
            places.set_limit(now);
            match self.limit() {
                n if n == now => break,
                n => now = n,
            }
        }
        now
    }
}

impl Outcome {
    /// What an origin transaction teaches, from the response it got (its
    /// time in nanoseconds from the request's first byte sent to the
    /// response's first byte, and its status), or `None` for none. A 5xx
    /// or no response is a failure, never an RTT: a fast error is no spare
    /// capacity. `None` for an RTT of 0, below the clock's resolution
    /// (9.2's milestones come from a clock cached per event loop turn).
    #[inline]
    pub fn of(response: Option<(Nanos, u16)>) -> Option<Outcome> {
        match response {
            Some((_, status)) if status >= 500 => Some(Outcome::Failed),
            None => Some(Outcome::Failed),
            Some((0, _)) => None,
            Some((rtt, _)) => Some(Outcome::Answered(rtt)),
        }
    }
}

#[cfg(test)]
mod tests;
