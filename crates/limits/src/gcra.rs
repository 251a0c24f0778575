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

    /// Fills the bucket (an operator forgot what it owed).
    pub fn reset(&self) {
        self.tat.store(0, Ordering::Release);
    }

    /// What is left at `now`, without taking anything.
    pub fn quota(&self, now: Nanos) -> Quota {
        self.params().quota(self.tat.load(Ordering::Acquire), now)
    }
}

#[cfg(test)]
mod tests;
