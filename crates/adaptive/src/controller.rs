//! The [`Controller`]: one origin's learned limit, shared by the threads
//! that record its samples. The sample path is lock-free (the window's
//! atomics, `window.rs`); the law (`law.rs`) runs under a mutex taken with
//! `try_lock`, at most once per window, by the sample that finds the window
//! due.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use limits::{Clock, MonotonicClock, Nanos};

use crate::config::Config;
use crate::law::Law;
use crate::window::{Outcome, Window};

/// Samples between two looks at the clock once a window has its samples.
const CLOCK_EVERY: u32 = 4;
/// After a window of this many transactions (its samples times the share
/// they were taken at), the next takes one in [`SAMPLE_EVERY`]
/// ([`Controller::wants_sample`]): still some 160 samples a window. Fewer
/// make a window's average noisy enough to pull the baseline down (it
/// follows a loaded window that looks faster): the simulations with a
/// jittered latency lost two thirds of the limit at 40.
const BUSY_WINDOW: u64 = 640;
const SAMPLE_EVERY: u32 = 4;

/// Whether the `n`th transaction offered after a busy window is measured:
/// one in [`SAMPLE_EVERY`], by the top bits of `n` times 2^32 / φ
/// (Fibonacci hashing). Consecutive ones are picked 2, 3 or 5 apart; over
/// any arithmetic progression of `n` (every second, third, ...
/// transaction: a regular mix of hits and misses) the picks are spread
/// evenly too, unlike `n % SAMPLE_EVERY`'s.
#[inline]
pub(crate) fn picked(n: u32) -> bool {
    n.wrapping_mul(0x9E37_79B9) < u32::MAX / SAMPLE_EVERY + 1
}

/// An adaptive concurrency limit (see the crate doc). Share it (`Arc`)
/// between the threads of one rule; it holds no slots itself: the caller
/// applies the limit to its own (`limits::Slots::set_limit`).
pub struct Controller<C: Clock = MonotonicClock> {
    config: Config,
    clock: C,
    /// The limit in force, read without the lock.
    limit: AtomicU32,
    /// When the open window is due; the first sample at or after it closes it.
    due: AtomicU64,
    window: Window,
    law: Mutex<Law>,
    /// Transactions offered after a busy window ([`Controller::wants_sample`]).
    offered: AtomicU32,
    /// The share sampled, as a mask of `offered`: 0 (every one) or
    /// `SAMPLE_EVERY - 1`; set at each window's close.
    share_mask: AtomicU32,
    /// When the probe in progress started; 0 when none.
    probe_since: AtomicU64,
}

/// What a controller shows (metrics, `show`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The limit in force.
    pub limit: u32,
    /// Pinned by the operator ([`Controller::pin`]).
    pub pinned: bool,
    /// Measuring the no-load latency: the limit is the minimum for now.
    pub probing: bool,
    /// The long-term (no-load) RTT; `None` until measured.
    pub baseline: Option<Nanos>,
    /// The last window's average RTT; `None` until a window closed.
    pub recent: Option<Nanos>,
    /// Windows closed so far.
    pub windows: u64,
}

impl State {
    /// The names of the plugins' gauges of a learned limit, in the order
    /// of [`State::gauges`].
    pub const GAUGES: [&'static str; 3] = ["limit", "rtt_baseline_us", "rtt_recent_us"];

    /// The gauges' values: the limit, then the baseline and recent RTT in
    /// microseconds (0 until measured).
    pub fn gauges(&self) -> [i64; 3] {
        let us = |n: Option<Nanos>| n.map_or(0, |n| i64::try_from(n / 1000).unwrap_or(i64::MAX));
        [i64::from(self.limit), us(self.baseline), us(self.recent)]
    }
}

impl<C: Clock> Controller<C> {
    /// A controller at `config.initial`. Out-of-range settings are replaced
    /// or clamped (see [`Config::check`] to refuse them instead).
    pub fn new(config: Config, clock: C) -> Self {
        let config = config.normalized();
        let now = clock.now();
        let law = Law::new(&config, now);
        Controller {
            limit: AtomicU32::new(law.limit(&config)),
            due: AtomicU64::new(now.saturating_add(law.window(&config))),
            window: Window::default(),
            law: Mutex::new(law),
            offered: AtomicU32::new(0),
            share_mask: AtomicU32::new(0),
            probe_since: AtomicU64::new(0),
            config,
            clock,
        }
    }

    /// The settings in use (normalized).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The limit in force: one atomic load.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether to measure the next transaction at all: every one, unless
    /// the last window had [`BUSY_WINDOW`] transactions or more: then one
    /// in [`SAMPLE_EVERY`], spread evenly over the window (taking a
    /// window's first transactions instead would weigh its start, when
    /// the requests sent before the last change answer, and slow the
    /// controller down). Measuring one (the caller's reads of its timings
    /// and status) costs more than asking, so the caller may ask of every
    /// transaction, before it knows whether one went to the origin: the
    /// share is picked by a hash of a counter ([`picked`]), not its
    /// remainder, which could fall in step with a regular mix of cache hits
    /// and misses and measure all or none of the misses. A load; after a
    /// busy window, a relaxed atomic add too.
    #[inline]
    pub fn wants_sample(&self) -> bool {
        if self.share_mask.load(Ordering::Relaxed) == 0 {
            return true;
        }
        picked(self.offered.fetch_add(1, Ordering::Relaxed))
    }

    /// Records one origin transaction. Call it only for transactions that
    /// reached the origin (a cache hit teaches nothing), once each, when the
    /// first response byte came or the transaction failed. `inflight`: the
    /// most origin requests in flight this one saw, the larger of the counts
    /// when it was sent and when it was answered (the sent one alone would
    /// miss the requests that joined it).
    ///
    /// Returns the new limit when this sample closed a window that changed
    /// it: the caller applies it (`Slots::set_limit`). Windows are at least
    /// `min_window` apart, so two changes never race in practice.
    ///
    /// Cost: three relaxed atomic adds (two for a failure, five for an
    /// unloaded sample) and a load; a clock read on one sample in
    /// four (`CLOCK_EVERY`) once the window has its samples; once per window, a
    /// `try_lock` and the law's few float operations.
    #[inline]
    pub fn record(&self, outcome: Outcome, inflight: u32) -> Option<u32> {
        let unloaded = inflight <= self.config.min && self.sent_in_probe(outcome);
        let seen = self.window.add(outcome, inflight, unloaded);
        // The clock (~95 instructions) only where the window could close:
        // once it has its samples, then every `CLOCK_EVERY`th (a window
        // closes at most that many samples after it is due).
        let min = self.config.min_samples;
        if seen < min || (seen - min) % CLOCK_EVERY != 0 {
            return None;
        }
        let now = self.clock.now();
        if now < self.due.load(Ordering::Relaxed) {
            return None;
        }
        self.close(now)
    }

    /// The places enforce `limit` now ([`Controller::observe`]).
    #[inline]
    pub(crate) fn note_enforced(&self, limit: u32) {
        self.window.note_enforced(limit);
    }

    /// While a probe measures the no-load latency, whether this answer's
    /// request was sent after it started (now − RTT): one that was sent
    /// into the load before it and ends once the load has drained would
    /// teach the baseline a loaded RTT (its count at the close is low). The
    /// clock is read for it during probes only; otherwise one load.
    #[inline]
    fn sent_in_probe(&self, outcome: Outcome) -> bool {
        let since = self.probe_since.load(Ordering::Relaxed);
        match outcome {
            Outcome::Answered(rtt) if since != 0 => self.clock.now().saturating_sub(rtt) >= since,
            _ => true,
        }
    }

    /// Closes the window if it is due and has its samples; whoever holds
    /// the lock already does it.
    #[cold]
    #[inline(never)]
    fn close(&self, now: Nanos) -> Option<u32> {
        let mut law = self.law.try_lock()?;
        if now < self.due.load(Ordering::Relaxed)
            || self.window.outcomes() < u64::from(self.config.min_samples)
        {
            // Too few samples: the window goes on until it has them.
            return None;
        }
        let stats = self.window.take();
        let share = u64::from(self.share_mask.load(Ordering::Relaxed)) + 1;
        let busy = stats.outcomes().saturating_mul(share) >= BUSY_WINDOW;
        self.share_mask
            .store(if busy { SAMPLE_EVERY - 1 } else { 0 }, Ordering::Relaxed);
        let before = law.limit(&self.config);
        law.close(&self.config, &stats, now);
        self.due.store(
            now.saturating_add(law.window(&self.config)),
            Ordering::Relaxed,
        );
        let after = law.limit(&self.config);
        self.limit.store(after, Ordering::Relaxed);
        self.note_probe(&law, now);
        (after != before).then_some(after)
    }

    /// Pins the limit (`set TAG limit=N`: `Some(N)`, at least 1, not held
    /// to the bounds) or releases it (`limit=auto`: `None`; learning resumes
    /// from the pinned value, clamped into the bounds). While pinned, windows
    /// still measure the RTTs shown. Returns the limit in force, for the
    /// caller to apply.
    pub fn pin(&self, limit: Option<u32>) -> u32 {
        let mut law = self.law.lock();
        law.pin(limit, &self.config);
        let now = law.limit(&self.config);
        self.limit.store(now, Ordering::Relaxed);
        self.note_probe(&law, self.clock.now());
        now
    }

    /// Keeps `probe_since` in step with the law: set when a probe starts,
    /// 0 once it is over (or a pin ended it). Under the law's lock.
    fn note_probe(&self, law: &Law, now: Nanos) {
        let was = self.probe_since.load(Ordering::Relaxed);
        match (law.probing(), was) {
            (true, 0) => self.probe_since.store(now.max(1), Ordering::Relaxed),
            (false, w) if w != 0 => self.probe_since.store(0, Ordering::Relaxed),
            _ => {}
        }
    }

    /// The state, for metrics and `show`.
    pub fn state(&self) -> State {
        let law = self.law.lock();
        State {
            limit: law.limit(&self.config),
            pinned: law.pinned().is_some(),
            probing: law.probing(),
            baseline: law.baseline(),
            recent: law.recent(),
            windows: law.windows(),
        }
    }
}

#[cfg(test)]
mod tests;
