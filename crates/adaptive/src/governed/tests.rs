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
    let ms = 3_000_000;
    let of = |r| Outcome::of(r);
    assert_eq!(of(Some((ms, 200))), Some(Outcome::Answered(3_000_000)));
    assert_eq!(of(Some((ms, 404))), Some(Outcome::Answered(3_000_000)));
    assert_eq!(of(Some((ms, 503))), Some(Outcome::Failed));
    assert_eq!(of(Some((0, 503))), Some(Outcome::Failed));
    assert_eq!(of(Some((0, 200))), None);
    assert_eq!(of(None), Some(Outcome::Failed));
}
