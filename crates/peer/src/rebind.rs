//! When a peer port in use (by an older copy of the plugin, whose rules an
//! old transaction may keep for hours, or by another process) is tried
//! again, and when diags.log hears of it: a pure schedule, the clock passed
//! in.
//!
//! Tries come 1 s after the first failure, then each delay doubles up to
//! [`MAX_DELAY`], forever: a bind a second at first, then one every 30 s,
//! so an old copy that holds the port for long costs ~3 binds a minute.
//! The first failure is logged by the caller; later ones at most once per
//! [`SAY_EVERY`].

use std::time::{Duration, Instant};

/// The delay before the first try again.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest delay between tries.
pub const MAX_DELAY: Duration = Duration::from_secs(30);
/// How often a port still in use is said again.
pub const SAY_EVERY: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Schedule {
    /// When the port was first found in use.
    since: Instant,
    next: Instant,
    delay: Duration,
    said: Instant,
}

impl Schedule {
    /// The port was found in use at `now` (and said so).
    pub fn new(now: Instant) -> Schedule {
        Schedule {
            since: now,
            next: now + FIRST_DELAY,
            delay: FIRST_DELAY,
            said: now,
        }
    }

    /// Whether to try the bind at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// The try at `now` found the port in use again: schedules the next.
    /// Returns how long the port has been in use if that is to be said now.
    pub fn in_use(&mut self, now: Instant) -> Option<Duration> {
        self.delay = (self.delay * 2).min(MAX_DELAY);
        self.next = now + self.delay;
        if now.saturating_duration_since(self.said) >= SAY_EVERY {
            self.said = now;
            return Some(now.saturating_duration_since(self.since));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a schedule whose every try fails, over `span`, polled every
    /// 10 ms as the exchange's tick does: the tries' times and the times said.
    fn run(span: Duration) -> (Vec<Duration>, Vec<(Duration, Duration)>) {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let (mut tries, mut said) = (Vec::new(), Vec::new());
        let mut t = Duration::ZERO;
        while t <= span {
            let now = t0 + t;
            if s.due(now) {
                tries.push(t);
                if let Some(for_) = s.in_use(now) {
                    said.push((t, for_));
                }
            }
            t += Duration::from_millis(10);
        }
        (tries, said)
    }

    #[test]
    fn tries_double_from_one_second_to_thirty_and_go_on_for_ever() {
        let (tries, _) = run(Duration::from_secs(2 * 3600));
        let secs: Vec<u64> = tries.iter().take(7).map(|d| d.as_secs()).collect();
        // 1, +2, +4, +8, +16, +30, +30 s.
        assert_eq!(secs, [1, 3, 7, 15, 31, 61, 91]);
        for w in tries.windows(2).skip(5) {
            assert_eq!(w[1] - w[0], MAX_DELAY, "at most one bind per 30 s");
        }
        // Still trying after two hours (the old copy's long transaction).
        let last = *tries.last().expect("tries");
        assert!(last > Duration::from_secs(2 * 3600 - 30), "last {last:?}");
        // Bounded in rate: after the first five, one bind per 30 s.
        assert!(tries.len() < 2 * 3600 / 30 + 6, "{} tries", tries.len());
    }

    #[test]
    fn a_port_still_in_use_is_said_at_most_every_five_minutes() {
        let (_, said) = run(Duration::from_secs(3600));
        assert!(!said.is_empty());
        let mut last = Duration::ZERO;
        for (at, for_) in &said {
            assert!(*at - last >= SAY_EVERY, "said at {last:?} and {at:?}");
            assert_eq!(at, for_, "says how long since the first failure");
            last = *at;
        }
        // An hour: said about 12 times (each at a try, up to 30 s late).
        assert!((10..=12).contains(&said.len()), "{said:?}");
    }

    #[test]
    fn a_late_poll_schedules_from_when_it_ran() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        assert!(!s.due(t0 + Duration::from_millis(999)));
        // The task ran 5 s late (a stalled machine): the next try is 2 s
        // after that, not a catch-up burst.
        let late = t0 + Duration::from_secs(6);
        assert!(s.due(late));
        assert_eq!(s.in_use(late), None);
        assert!(!s.due(late + Duration::from_millis(1999)));
        assert!(s.due(late + Duration::from_secs(2)));
    }
}
