//! Time as nanoseconds on a monotonic axis, injected so limiters are testable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds since an arbitrary, fixed origin.
pub type Nanos = u64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;
pub const NANOS_PER_MS: u64 = 1_000_000;

/// A source of monotonic time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Nanos;
}

/// A shared clock (tests hand one `ManualClock` to several limiters).
impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// The process's monotonic clock (`Instant`), as nanoseconds since first use.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        // Offset by a second so "now" is never 0 (0 means "never" in some states).
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX) + NANOS_PER_SEC
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: Nanos) -> Self {
        ManualClock(AtomicU64::new(start))
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    pub fn set(&self, t: Nanos) {
        self.0.store(t, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::SeqCst)
    }
}
