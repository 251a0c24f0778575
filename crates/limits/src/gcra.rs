//! A rate bucket as GCRA (generic cell rate algorithm): the whole state is
//! one `AtomicU64`, the theoretical arrival time (TAT) of the next request.
//!
//! With emission interval `T = 1 s / rate` and burst `b`, a request at `now`
//! conforms when `TAT - τ <= now` with `τ = (b - 1)·T`; it then moves TAT to
//! `max(TAT, now) + T`. That is a token bucket of capacity `b` refilled
//! continuously at `rate`, exact for any rate (no refill tick, no rounding to
//! whole tokens per tick) and starting full.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::clock::{Nanos, NANOS_PER_SEC};

/// Most debt charges may put on a bucket (`GcraParams::charge`): one day of
/// its time below empty (as dthrottle's `MAX_PEER_DEBT` for peers' hits).
pub const MAX_DEBT: Nanos = 86_400 * NANOS_PER_SEC;

/// Outcome of [`Gcra::reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// Conforms now; one token was taken.
    Now,
    /// Conforms after this wait; the token is already reserved for then.
    After(Nanos),
    /// Would have to wait this long, which is more than allowed; nothing taken.
    Denied(Nanos),
}

impl Reservation {
    /// The wait it implies (0 for `Now`).
    pub fn wait(self) -> Nanos {
        match self {
            Reservation::Now => 0,
            Reservation::After(w) | Reservation::Denied(w) => w,
        }
    }
}

/// Remaining quota, for `RateLimit` response headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Requests that would conform right now.
    pub remaining: u32,
    /// Time until more quota becomes available (0 when the bucket is full).
    pub replenish_in: Nanos,
}

/// A bucket's parameters and arithmetic on a TAT value: shared by the
/// atomic [`Gcra`] and by keyed state that keeps its TAT as a plain `u64`
/// under a lock. A TAT of 0 is a full bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraParams {
    interval: Nanos,
    tau: Nanos,
    burst: u32,
}

impl GcraParams {
    /// `interval` between requests in the long run (1 s / rate) and `burst`
    /// requests allowed at once from a full bucket.
    pub fn new(interval: Nanos, burst: u32) -> GcraParams {
        let interval = interval.max(1);
        let burst = burst.max(1);
        GcraParams {
            interval,
            tau: interval.saturating_mul(u64::from(burst - 1)),
            burst,
        }
    }

    /// For `per_second` requests per second (may be fractional, > 0).
    pub fn per_second(per_second: f64, burst: u32) -> GcraParams {
        let interval = if per_second > 0.0 {
            (NANOS_PER_SEC as f64 / per_second).round()
        } else {
            f64::MAX
        };
        GcraParams::new(interval.clamp(1.0, u64::MAX as f64) as u64, burst)
    }

    pub fn interval(&self) -> Nanos {
        self.interval
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Takes a token from a bucket at `tat`, or reserves one up to
    /// `max_wait` ahead (`None`: no waiting). Returns the outcome and the new
    /// TAT (unchanged when denied).
    pub fn reserve(&self, tat: Nanos, now: Nanos, max_wait: Option<Nanos>) -> (Reservation, Nanos) {
        let base = tat.max(now);
        let wait = base.saturating_sub(self.tau).saturating_sub(now);
        if wait > 0 && max_wait.is_none_or(|m| wait > m) {
            return (Reservation::Denied(wait), tat);
        }
        let next = base.saturating_add(self.interval);
        match wait {
            0 => (Reservation::Now, next),
            w => (Reservation::After(w), next),
        }
    }

    /// Whether a request at `now` would conform (a token is there), without
    /// taking it: `Err(wait)` when the bucket is empty. The check half of
    /// check-then-charge (`--count-status`).
    #[inline]
    pub fn check(&self, tat: Nanos, now: Nanos) -> Result<(), Nanos> {
        match tat.max(now).saturating_sub(self.tau).saturating_sub(now) {
            0 => Ok(()),
            w => Err(w),
        }
    }

    /// The TAT after charging one token whether or not the bucket has one:
    /// the charge half of check-then-charge. Requests that all passed the
    /// check while the bucket held one token are all charged, each its full
    /// interval, so the bucket goes below empty by what they cost and stays
    /// refused until that is repaid: over `t`, at most `burst + rate·t` plus
    /// the requests in flight at once are charged. A shallower cap would let
    /// every round of concurrent requests through on one token (the charges
    /// beyond it dropped). The debt is capped only by [`MAX_DEBT`] below
    /// empty, to keep the arithmetic away from `u64::MAX`.
    #[inline]
    pub fn charge(&self, tat: Nanos, now: Nanos) -> Nanos {
        let full = self.interval.saturating_mul(u64::from(self.burst));
        let cap = now.saturating_add(full).saturating_add(MAX_DEBT);
        // Never moves a TAT back (one already past the cap stays).
        tat.max(now).saturating_add(self.interval).min(cap).max(tat)
    }

    /// The TAT after giving back one token; never beyond a full bucket.
    pub fn refund(&self, tat: Nanos, now: Nanos) -> Nanos {
        if tat <= now {
            return tat;
        }
        tat.saturating_sub(self.interval).max(now)
    }

    /// What is left at `now` in a bucket at `tat`.
    pub fn quota(&self, tat: Nanos, now: Nanos) -> Quota {
        let debt = tat.saturating_sub(now);
        if debt > self.tau {
            return Quota {
                remaining: 0,
                replenish_in: debt - self.tau,
            };
        }
        let remaining = ((self.tau - debt) / self.interval + 1).min(u64::from(self.burst)) as u32;
        let replenish_in = match debt % self.interval {
            0 if debt == 0 => 0,
            0 => self.interval,
            r => r,
        };
        Quota {
            remaining,
            replenish_in,
        }
    }
}

/// Bucket parameters that can be changed while other threads use them (a
/// configuration reload). A decision racing a change may pair the old
/// interval with the new burst once; each decision still sees a valid bucket.
#[derive(Debug)]
pub struct LiveParams {
    // Stored as computed (tau too): decisions only load them.
    interval: AtomicU64,
    tau: AtomicU64,
    burst: AtomicU32,
}

impl LiveParams {
    pub fn new(p: GcraParams) -> LiveParams {
        LiveParams {
            interval: AtomicU64::new(p.interval),
            tau: AtomicU64::new(p.tau),
            burst: AtomicU32::new(p.burst),
        }
    }

    #[inline]
    pub fn get(&self) -> GcraParams {
        GcraParams {
            interval: self.interval.load(Ordering::Relaxed),
            tau: self.tau.load(Ordering::Relaxed),
            burst: self.burst.load(Ordering::Relaxed),
        }
    }

    /// Interval and tau only: all that taking and giving back tokens reads
    /// (two loads, not three, on every decision).
    #[inline]
    fn for_reserve(&self) -> GcraParams {
        GcraParams {
            interval: self.interval.load(Ordering::Relaxed),
            tau: self.tau.load(Ordering::Relaxed),
            burst: 1,
        }
    }

    /// Applies to the next decision; the bucket's level (its TAT) carries over.
    pub fn set(&self, p: GcraParams) {
        self.interval.store(p.interval, Ordering::Relaxed);
        self.tau.store(p.tau, Ordering::Relaxed);
        self.burst.store(p.burst, Ordering::Relaxed);
    }
}

/// A rate bucket shared by threads: the TAT in one `AtomicU64`.
#[derive(Debug)]
pub struct Gcra {
    tat: AtomicU64,
    params: LiveParams,
}

impl Gcra {
    /// `interval` between requests in the long run (1 s / rate) and `burst`
    /// requests allowed at once from a full bucket.
    pub fn new(interval: Nanos, burst: u32) -> Gcra {
        Gcra::with(GcraParams::new(interval, burst))
    }

    /// A bucket for `per_second` requests per second (may be fractional, > 0).
    pub fn per_second(per_second: f64, burst: u32) -> Gcra {
        Gcra::with(GcraParams::per_second(per_second, burst))
    }

    pub fn with(params: GcraParams) -> Gcra {
        Gcra {
            tat: AtomicU64::new(0),
            params: LiveParams::new(params),
        }
    }

    pub fn params(&self) -> GcraParams {
        self.params.get()
    }

    /// Changes rate and burst live; the bucket's level carries over.
    pub fn set_params(&self, params: GcraParams) {
        self.params.set(params);
    }

    pub fn interval(&self) -> Nanos {
        self.params().interval
    }

    pub fn burst(&self) -> u32 {
        self.params().burst
    }

    /// Takes a token now, or reserves one up to `max_wait` in the future
    /// (`None`: no waiting allowed).
    pub fn reserve(&self, now: Nanos, max_wait: Option<Nanos>) -> Reservation {
        let params = self.params.for_reserve();
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let (r, next) = params.reserve(tat, now, max_wait);
            if next == tat {
                return r;
            }
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return r,
                Err(actual) => tat = actual,
            }
        }
    }

    /// Takes a token if one is available now; otherwise returns the wait.
    pub fn try_acquire(&self, now: Nanos) -> Result<(), Nanos> {
        match self.reserve(now, None) {
            Reservation::Now => Ok(()),
            Reservation::After(w) | Reservation::Denied(w) => Err(w),
        }
    }

    /// Gives back one token taken for a request that was then not served
    /// (refused for another reason, expired, abandoned). Never fills the
    /// bucket beyond full.
    pub fn refund(&self, now: Nanos) {
        let params = self.params.for_reserve();
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let back = params.refund(tat, now);
            if back == tat {
                return;
            }
            match self
                .tat
                .compare_exchange_weak(tat, back, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => tat = actual,
            }
        }
    }

    /// [`GcraParams::check`] on this bucket.
    pub fn check(&self, now: Nanos) -> Result<(), Nanos> {
        self.params
            .for_reserve()
            .check(self.tat.load(Ordering::Acquire), now)
    }

    /// [`GcraParams::charge`] on this bucket.
    pub fn charge(&self, now: Nanos) {
        let params = self.params.get();
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let next = params.charge(tat, now);
            if next == tat {
                return;
            }
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => tat = actual,
            }
        }
    }

    /// What is left at `now`, without taking anything.
    pub fn quota(&self, now: Nanos) -> Quota {
        self.params().quota(self.tat.load(Ordering::Acquire), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Nanos = NANOS_PER_SEC;

    #[test]
    fn starts_full_and_allows_burst_then_refills_at_rate() {
        let g = Gcra::per_second(10.0, 5);
        let t0 = 100 * S;
        for _ in 0..5 {
            assert_eq!(g.try_acquire(t0), Ok(()));
        }
        assert_eq!(g.try_acquire(t0), Err(S / 10));
        assert_eq!(g.try_acquire(t0 + S / 10 - 1), Err(1));
        assert_eq!(g.try_acquire(t0 + S / 10), Ok(()));
    }

    #[test]
    fn changed_params_apply_to_the_next_decision_and_keep_the_level() {
        let g = Gcra::per_second(1.0, 2);
        let t0 = 100 * S;
        assert_eq!(g.try_acquire(t0), Ok(()));
        assert_eq!(g.try_acquire(t0), Ok(()));
        assert_eq!(g.try_acquire(t0), Err(S));
        // 10/s with burst 5: the debt (2 s ahead) carries over as time.
        g.set_params(GcraParams::per_second(10.0, 5));
        assert_eq!((g.interval(), g.burst()), (S / 10, 5));
        assert_eq!(g.try_acquire(t0), Err(2 * S - 4 * S / 10));
        assert_eq!(g.try_acquire(t0 + 2 * S), Ok(()));
    }

    #[test]
    fn slow_rates_refill_exactly() {
        // Upstream refills rate/40 whole tokens every 25 ms: nothing below 40/s.
        let g = Gcra::per_second(1.0, 1);
        assert_eq!(g.try_acquire(5 * S), Ok(()));
        assert_eq!(g.try_acquire(5 * S + S - 1), Err(1));
        assert_eq!(g.try_acquire(6 * S), Ok(()));
        let half = Gcra::per_second(0.5, 1);
        assert_eq!(half.try_acquire(S), Ok(()));
        assert_eq!(half.try_acquire(2 * S), Err(S));
        assert_eq!(half.try_acquire(3 * S), Ok(()));
    }

    #[test]
    fn reservations_queue_in_order_up_to_max_wait() {
        let g = Gcra::per_second(10.0, 1);
        let t = 10 * S;
        assert_eq!(g.reserve(t, Some(S)), Reservation::Now);
        assert_eq!(g.reserve(t, Some(S)), Reservation::After(S / 10));
        assert_eq!(g.reserve(t, Some(S)), Reservation::After(2 * S / 10));
        // Too long a wait is denied and reserves nothing.
        assert_eq!(g.reserve(t, Some(S / 4)), Reservation::Denied(3 * S / 10));
        assert_eq!(g.reserve(t, Some(S)), Reservation::After(3 * S / 10));
    }

    #[test]
    fn refund_gives_back_one_token_but_never_overfills() {
        let g = Gcra::per_second(1.0, 2);
        let t = 20 * S;
        g.try_acquire(t).unwrap();
        g.try_acquire(t).unwrap();
        assert!(g.try_acquire(t).is_err());
        g.refund(t);
        assert_eq!(g.try_acquire(t), Ok(()));
        g.refund(t);
        g.refund(t);
        g.refund(t);
        assert_eq!(g.quota(t).remaining, 2);
    }

    #[test]
    fn quota_reports_remaining_and_replenish() {
        let g = Gcra::per_second(2.0, 4);
        let t = 50 * S;
        assert_eq!(
            g.quota(t),
            Quota {
                remaining: 4,
                replenish_in: 0
            }
        );
        g.try_acquire(t).unwrap();
        assert_eq!(
            g.quota(t),
            Quota {
                remaining: 3,
                replenish_in: S / 2
            }
        );
        for _ in 0..3 {
            g.try_acquire(t).unwrap();
        }
        assert_eq!(
            g.quota(t),
            Quota {
                remaining: 0,
                replenish_in: S / 2
            }
        );
        assert_eq!(
            g.quota(t + S / 2),
            Quota {
                remaining: 1,
                replenish_in: S / 2
            }
        );
        assert_eq!(
            g.quota(t + 2 * S),
            Quota {
                remaining: 4,
                replenish_in: 0
            }
        );
    }

    #[test]
    fn check_takes_nothing_and_each_charge_past_empty_costs_its_interval() {
        let p = GcraParams::per_second(10.0, 3);
        let t = 100 * S;
        let mut tat = 0;
        for _ in 0..3 {
            assert_eq!(p.check(tat, t), Ok(()));
            assert_eq!(p.check(tat, t), Ok(()), "a check takes nothing");
            tat = p.charge(tat, t);
        }
        assert_eq!(p.check(tat, t), Err(S / 10));
        // Charges past empty (concurrent requests that all passed) each
        // count in full: ten more are ten intervals more to wait.
        for _ in 0..10 {
            tat = p.charge(tat, t);
        }
        assert_eq!(tat, t + 13 * S / 10);
        assert_eq!(p.check(tat, t), Err(11 * S / 10));
        assert_eq!(p.check(tat, t + 11 * S / 10), Ok(()));
        // The atomic bucket agrees.
        let g = Gcra::per_second(10.0, 3);
        for _ in 0..13 {
            g.charge(t);
        }
        assert_eq!(g.check(t), Err(11 * S / 10));
        assert_eq!(g.quota(t).remaining, 0);
    }

    #[test]
    fn charge_debt_is_capped_at_max_debt_below_empty() {
        // 1/s, burst 2: a full bucket spans 2 s; debt stops at one day more.
        let p = GcraParams::per_second(1.0, 2);
        let t = 100 * S;
        let cap = t + 2 * S + MAX_DEBT;
        assert_eq!(p.charge(cap - S / 2, t), cap);
        assert_eq!(p.charge(cap, t), cap);
        // One already beyond (charged with an older, longer interval) stays.
        assert_eq!(p.charge(cap + S, t), cap + S);
        // Huge intervals saturate instead of wrapping.
        let slow = GcraParams::new(u64::MAX / 2, 1000);
        assert_eq!(slow.charge(0, t), t + u64::MAX / 2);
        assert_eq!(slow.charge(t + u64::MAX / 2, t), u64::MAX);
    }

    proptest! {
        /// Over any run of requests, admissions never exceed burst + rate·elapsed
        /// (rounded down to whole intervals), and the quota agrees with try_acquire.
        #[test]
        fn never_exceeds_burst_plus_rate(
            interval_ms in 1u64..2000,
            burst in 1u32..50,
            gaps in proptest::collection::vec(0u64..500, 1..400),
        ) {
            let interval = interval_ms * 1_000_000;
            let g = Gcra::new(interval, burst);
            let start = 1_000 * S;
            let mut now = start;
            let mut admitted = 0u64;
            for gap in gaps {
                now += gap * 1_000_000;
                let q = g.quota(now);
                let ok = g.try_acquire(now).is_ok();
                prop_assert_eq!(ok, q.remaining > 0);
                if ok {
                    admitted += 1;
                }
                let bound = u64::from(burst) + (now - start) / interval;
                prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
            }
        }

        /// Check-then-charge, one request after another: a request goes on
        /// only if the check passes, and each that goes on may be charged
        /// (its response status in the list). Charged requests never exceed
        /// burst + rate·elapsed, and the check agrees with `reserve`.
        #[test]
        fn check_then_charge_never_exceeds_burst_plus_rate(
            interval_ms in 1u64..2000,
            burst in 1u32..50,
            steps in proptest::collection::vec((0u64..500, proptest::bool::ANY), 1..400),
        ) {
            let interval = interval_ms * 1_000_000;
            let p = GcraParams::new(interval, burst);
            let start = 1_000 * S;
            let (mut now, mut tat, mut charged) = (start, 0, 0u64);
            for (gap, failed) in steps {
                now += gap * 1_000_000;
                let passes = p.check(tat, now).is_ok();
                prop_assert_eq!(passes, p.reserve(tat, now, None).0 == Reservation::Now);
                if passes && failed {
                    tat = p.charge(tat, now);
                    charged += 1;
                }
                let bound = u64::from(burst) + (now - start) / interval;
                prop_assert!(charged <= bound, "charged {} > bound {}", charged, bound);
            }
        }

        /// Charging never moves a TAT back, costs a full interval below the
        /// cap, and never leaves more than [`MAX_DEBT`] past empty.
        #[test]
        fn charge_is_monotonic_and_capped(
            interval in 1u64..10_000_000_000,
            burst in 1u32..1000,
            tat in 0u64..(1 << 62),
            now in 0u64..(1 << 62),
        ) {
            let p = GcraParams::new(interval, burst);
            let next = p.charge(tat, now);
            prop_assert!(next >= tat);
            let cap = now + interval * u64::from(burst) + MAX_DEBT;
            prop_assert!(next <= cap.max(tat));
            if tat.max(now) + interval <= cap {
                prop_assert_eq!(next, tat.max(now) + interval);
            }
        }

        /// A client sending exactly at the rate is never refused after its burst.
        #[test]
        fn steady_rate_is_always_admitted(interval_ms in 1u64..1000, burst in 1u32..10, n in 1usize..200) {
            let interval = interval_ms * 1_000_000;
            let g = Gcra::new(interval, burst);
            let mut now = 10 * S;
            for _ in 0..n {
                prop_assert!(g.try_acquire(now).is_ok());
                now += interval;
            }
        }
    }
}
