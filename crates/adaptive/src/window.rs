//! One window's samples, gathered lock-free: every field is its own atomic,
//! added to by the threads that record samples and taken whole (swapped to
//! zero) by the one that closes the window.
//!
//! The fields are not updated together, so a sample recorded while the
//! window closes may have its count in one window and its RTT in the next.
//! That skews one window by a sample per racing thread, which the window's
//! average (at least `min_samples` of them) absorbs; the price of not
//! locking on the sample path.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use limits::{Nanos, NANOS_PER_SEC};

/// A sample's RTT counts as at most this: the sums cannot overflow a
/// window (2^64 ns is 584 years of RTT).
pub(crate) const MAX_RTT: Nanos = 600 * NANOS_PER_SEC;

/// How one origin transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The origin answered (any status but a failure); the RTT from the
    /// request sent to the first response byte.
    Answered(Nanos),
    /// The origin failed: a 5xx, a connection error, a timeout. Never an
    /// RTT: a fast error is not spare capacity.
    Failed,
}

#[derive(Debug, Default)]
pub(crate) struct Window {
    answered: AtomicU32,
    rtt_sum: AtomicU64,
    failed: AtomicU32,
    /// Answered samples that were unloaded (see [`Stats::unloaded`]).
    unloaded: AtomicU32,
    unloaded_sum: AtomicU64,
    max_inflight: AtomicU32,
    /// The lowest limit the places enforced in the window, as `u32::MAX -
    /// limit` (so a `fetch_max`, and 0 is none).
    enforced_gap: AtomicU32,
    /// Outcomes added since the window opened (`add`'s count).
    seen: AtomicU32,
}

/// A closed window's samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub answered: u32,
    pub rtt_sum: u64,
    pub failed: u32,
    /// Answered with at most the smallest limit in flight, when sent and
    /// when answered: what the origin takes at its no-load latency.
    pub unloaded: u32,
    pub unloaded_sum: u64,
    /// The most origin requests in flight any sample saw.
    pub max_inflight: u32,
    /// The lowest limit the places enforced while the window was open,
    /// when the caller said ([`Controller::observe`]): below the
    /// controller's while a raise ramps up to it.
    ///
    /// [`Controller::observe`]: crate::Controller::observe
    pub enforced: Option<u32>,
}

impl Window {
    /// Adds a sample; `unloaded` if it was answered at low concurrency.
    /// Returns the outcomes added since the window opened, this one included.
    #[inline]
    pub fn add(&self, outcome: Outcome, inflight: u32, unloaded: bool) -> u32 {
        match outcome {
            Outcome::Answered(rtt) => {
                let rtt = rtt.min(MAX_RTT);
                self.rtt_sum.fetch_add(rtt, Ordering::Relaxed);
                self.answered.fetch_add(1, Ordering::Relaxed);
                if unloaded {
                    self.unloaded_sum.fetch_add(rtt, Ordering::Relaxed);
                    self.unloaded.fetch_add(1, Ordering::Relaxed);
                }
            }
            Outcome::Failed => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        // A load first: the line is written only by a new maximum.
        if inflight > self.max_inflight.load(Ordering::Relaxed) {
            self.max_inflight.fetch_max(inflight, Ordering::Relaxed);
        }
        self.seen.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    }

    /// The places enforce `limit` now (the lowest in the window counts).
    #[inline]
    pub fn note_enforced(&self, limit: u32) {
        let gap = u32::MAX - limit;
        if gap > self.enforced_gap.load(Ordering::Relaxed) {
            self.enforced_gap.fetch_max(gap, Ordering::Relaxed);
        }
    }

    /// Outcomes so far (answered and failed).
    pub fn outcomes(&self) -> u64 {
        u64::from(self.answered.load(Ordering::Relaxed))
            + u64::from(self.failed.load(Ordering::Relaxed))
    }

    /// Takes the samples, leaving the window empty.
    pub fn take(&self) -> Stats {
        let stats = Stats {
            answered: self.answered.swap(0, Ordering::Relaxed),
            rtt_sum: self.rtt_sum.swap(0, Ordering::Relaxed),
            failed: self.failed.swap(0, Ordering::Relaxed),
            unloaded: self.unloaded.swap(0, Ordering::Relaxed),
            unloaded_sum: self.unloaded_sum.swap(0, Ordering::Relaxed),
            max_inflight: self.max_inflight.swap(0, Ordering::Relaxed),
            enforced: match self.enforced_gap.swap(0, Ordering::Relaxed) {
                0 => None,
                gap => Some(u32::MAX - gap),
            },
        };
        // A sample added meanwhile may miss this count: it only decides
        // when the clock is looked at, never what the window holds.
        self.seen.store(0, Ordering::Relaxed);
        stats
    }
}

impl Stats {
    pub fn outcomes(&self) -> u64 {
        u64::from(self.answered) + u64::from(self.failed)
    }

    /// The average RTT of the answered samples.
    pub fn mean(&self) -> Option<Nanos> {
        mean(self.rtt_sum, self.answered)
    }

    /// The average RTT of the unloaded samples.
    pub fn unloaded_mean(&self) -> Option<Nanos> {
        mean(self.unloaded_sum, self.unloaded)
    }

    /// Whether at least `percent` % of the outcomes failed.
    pub fn failing(&self, percent: u32) -> bool {
        self.failed > 0 && u64::from(self.failed) * 100 >= self.outcomes() * u64::from(percent)
    }
}

fn mean(sum: u64, n: u32) -> Option<Nanos> {
    // At least 1 ns: a zero baseline or RTT would divide by zero.
    (n > 0).then(|| (sum / u64::from(n)).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_adds_up_and_empties_when_taken() {
        let w = Window::default();
        w.add(Outcome::Answered(10), 3, true);
        w.add(Outcome::Answered(30), 7, false);
        w.add(Outcome::Failed, 5, false);
        w.note_enforced(9);
        w.note_enforced(12);
        w.note_enforced(8);
        assert_eq!(w.outcomes(), 3);
        let s = w.take();
        assert_eq!(
            s,
            Stats {
                answered: 2,
                rtt_sum: 40,
                failed: 1,
                unloaded: 1,
                unloaded_sum: 10,
                max_inflight: 7,
                enforced: Some(8),
            }
        );
        assert_eq!((s.mean(), s.unloaded_mean()), (Some(20), Some(10)));
        assert_eq!(w.take(), Stats::default());
        assert_eq!(Stats::default().mean(), None);
    }

    #[test]
    fn a_huge_rtt_counts_as_the_cap() {
        let w = Window::default();
        w.add(Outcome::Answered(u64::MAX), 1, false);
        w.add(Outcome::Answered(u64::MAX), 1, false);
        assert_eq!(w.take().mean(), Some(MAX_RTT));
    }

    #[test]
    fn failing_is_a_share_of_the_outcomes() {
        let s = |answered, failed| Stats {
            answered,
            failed,
            ..Stats::default()
        };
        assert!(!s(10, 0).failing(10));
        assert!(!s(91, 9).failing(10));
        assert!(s(90, 10).failing(10));
        assert!(s(0, 1).failing(100));
        assert!(!s(1, 1).failing(100));
    }
}
