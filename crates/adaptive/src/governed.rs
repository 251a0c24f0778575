//! Applying the learned limit to what it governs: rate_limit.so's slots,
//! throttle.so's gate. One path for both plugins: a sample is recorded
//! with the places in use, then the limit in force is applied; a pin is
//! applied until the controller and the places agree.

use std::sync::Arc;
use std::time::Duration;

use limits::{Clock, Slots, Waiter};

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
    /// The load it met is the larger of `entered_with` (the places held
    /// once it took its own; 0 if not kept) and the places held now: a
    /// request sent into a crowd that ends alone was not unloaded (the
    /// close-time count alone would teach the baseline a loaded RTT as
    /// the crowd drains). The limit applied is the controller's, whoever
    /// moved it last: a pin racing a window's close, applied in the other
    /// order, is put right by the next sample (one load and compare when
    /// nothing changed).
    ///
    /// A raise reaches the places a step per sample, an eighth of their
    /// limit (1 to [`RAISE_STEP`]): raising admits waiters inside the call
    /// (on the net thread of the transaction that closes), and a probe's
    /// end raises from the minimum back to what it was, so the origin
    /// meets a ramp (about 12 % more a sample) rather than the whole queue
    /// at once, which its latency would show. A fall applies at once.
    #[inline]
    pub fn observe(&self, outcome: Outcome, entered_with: u32, places: &impl Governed) {
        self.record(outcome, entered_with.max(places.in_flight()));
        let limit = self.limit();
        let now = places.limit();
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
    /// time from the request's first byte sent to the response's first
    /// byte, and its status), or `None` for none. A 5xx or no response is
    /// a failure, never an RTT: a fast error is no spare capacity. `None`
    /// for an RTT of 0, below the clock's resolution (9.2's milestones
    /// come from a clock cached per event loop turn).
    pub fn of(response: Option<(Duration, u16)>) -> Option<Outcome> {
        match response {
            Some((_, status)) if status >= 500 => Some(Outcome::Failed),
            None => Some(Outcome::Failed),
            Some((rtt, _)) if rtt.is_zero() => None,
            Some((rtt, _)) => Some(Outcome::Answered(
                u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use limits::ManualClock;

    use super::*;
    use crate::Config;

    /// Places that count what they are told.
    #[derive(Default)]
    struct Places {
        in_flight: AtomicU32,
        limit: AtomicU32,
        sets: AtomicU32,
    }

    impl Governed for Places {
        fn in_flight(&self) -> u32 {
            self.in_flight.load(Ordering::Relaxed)
        }
        fn limit(&self) -> u32 {
            self.limit.load(Ordering::Relaxed)
        }
        fn set_limit(&self, limit: u32) {
            self.sets.fetch_add(1, Ordering::Relaxed);
            self.limit.store(limit, Ordering::Relaxed);
        }
    }

    #[test]
    fn observe_applies_the_limit_only_when_it_differs() {
        let c = Controller::new(Config::default(), ManualClock::new(0));
        let p = Places::default();
        p.in_flight.store(3, Ordering::Relaxed);
        p.limit.store(19, Ordering::Relaxed);
        c.observe(Outcome::Answered(1_000_000), 0, &p);
        assert_eq!(p.limit(), c.limit());
        assert_eq!(p.sets.load(Ordering::Relaxed), 1);
        c.observe(Outcome::Answered(1_000_000), 0, &p);
        assert_eq!(p.sets.load(Ordering::Relaxed), 1, "nothing changed");
    }

    #[test]
    fn a_raise_reaches_the_places_a_step_per_sample() {
        let c = Controller::new(Config::default(), ManualClock::new(0));
        let p = Places::default();
        p.limit.store(4, Ordering::Relaxed);
        c.pin(Some(300));
        let mut steps = vec![4];
        for _ in 0..60 {
            c.observe(Outcome::Answered(1_000_000), 0, &p);
            steps.push(p.limit());
        }
        for w in steps.windows(2) {
            let want = (w[0] / 8).clamp(1, RAISE_STEP).min(300 - w[0]);
            assert_eq!(w[1] - w[0], want, "{steps:?}");
        }
        assert_eq!(&steps[..6], [4, 5, 6, 7, 8, 9]);
        assert_eq!(p.limit(), 300, "{steps:?}");
        c.pin(Some(5));
        c.observe(Outcome::Answered(1_000_000), 0, &p);
        assert_eq!(p.limit(), 5, "a fall applies at once");
    }

    #[test]
    fn pin_into_applies_and_releases() {
        let c = Controller::new(Config::default(), ManualClock::new(0));
        let p = Places::default();
        assert_eq!(c.pin_into(Some(7), &p), 7);
        assert_eq!(p.limit(), 7);
        assert_eq!(c.pin_into(None, &p), 7, "learning resumes from the pin");
        assert!(!c.state().pinned);
    }

    #[test]
    fn responses_teach_what_they_should() {
        let ms = Duration::from_millis(3);
        let of = |r| Outcome::of(r);
        assert_eq!(of(Some((ms, 200))), Some(Outcome::Answered(3_000_000)));
        assert_eq!(of(Some((ms, 404))), Some(Outcome::Answered(3_000_000)));
        assert_eq!(of(Some((ms, 503))), Some(Outcome::Failed));
        assert_eq!(of(Some((Duration::ZERO, 503))), Some(Outcome::Failed));
        assert_eq!(of(Some((Duration::ZERO, 200))), None);
        assert_eq!(of(None), Some(Outcome::Failed));
    }
}
