use super::*;
use std::sync::Arc;
use std::time::Duration;

use limits::{ManualClock, NANOS_PER_MS};
use proptest::prelude::*;

const MS: Nanos = NANOS_PER_MS;

fn controller(config: Config) -> (Arc<ManualClock>, Controller<Arc<ManualClock>>) {
    let clock = Arc::new(ManualClock::new(1));
    (clock.clone(), Controller::new(config, clock))
}

#[test]
fn a_window_closes_when_due_and_only_with_its_samples() {
    let (clock, c) = controller(Config::with_bounds(4, 22).unwrap());
    assert_eq!(c.limit(), 20);
    // Unloaded samples before the window is due: nothing yet.
    for _ in 0..20 {
        assert_eq!(c.record(Outcome::Answered(10 * MS), 3), None);
    }
    assert_eq!(c.state().windows, 0);
    clock.advance(Duration::from_millis(100));
    // Due, but the clock is looked at every 4th sample past the 10th (22).
    assert_eq!(c.record(Outcome::Answered(10 * MS), 20), None);
    // Then no queueing at 20 in flight: grown by one.
    assert_eq!(c.record(Outcome::Answered(10 * MS), 20), Some(21));
    let s = c.state();
    assert_eq!(
        (s.windows, s.baseline, s.recent),
        (1, Some(10 * MS), Some(10 * MS))
    );
    // A window with too few samples goes on past its due time.
    clock.advance(Duration::from_secs(5));
    for _ in 0..9 {
        assert_eq!(c.record(Outcome::Answered(10 * MS), 21), None);
    }
    assert_eq!(c.state().windows, 1);
    assert_eq!(c.record(Outcome::Answered(10 * MS), 21), Some(22));
    // A window that leaves the limit as it was (at max) reports no change.
    clock.advance(Duration::from_millis(100));
    for _ in 0..10 {
        assert_eq!(c.record(Outcome::Answered(10 * MS), 22), None);
    }
    assert_eq!((c.state().windows, c.limit()), (3, 22));
}

#[test]
fn failures_count_toward_a_window_but_never_as_rtts() {
    let (clock, c) = controller(Config::default());
    clock.advance(Duration::from_millis(100));
    for _ in 0..9 {
        c.record(Outcome::Failed, 20);
    }
    assert_eq!(c.record(Outcome::Failed, 20), Some(16));
    assert_eq!((c.state().recent, c.state().baseline), (None, None));
}

#[test]
fn a_pin_holds_the_limit_and_its_release_resumes_learning() {
    let (clock, c) = controller(Config::default());
    assert_eq!(c.pin(Some(7)), 7);
    assert_eq!(c.limit(), 7);
    clock.advance(Duration::from_millis(100));
    for _ in 0..10 {
        assert_eq!(c.record(Outcome::Answered(10 * MS), 7), None);
    }
    let s = c.state();
    assert!(s.pinned && s.windows == 1 && s.limit == 7);
    assert_eq!(s.baseline, None, "7 in flight is not unloaded");
    assert_eq!(c.pin(None), 7);
    assert!(!c.state().pinned);
}

#[test]
fn bad_settings_are_made_usable() {
    let bad = Config {
        min: 0,
        max: 0,
        initial: 50,
        min_window: 0,
        max_window: 0,
        min_samples: 0,
        smoothing: f64::NAN,
        failure_percent: 0,
        backoff: 2.0,
        probe_interval: 0,
    };
    let (clock, c) = controller(bad);
    assert_eq!(c.config().check(), Ok(()));
    assert_eq!(c.limit(), 1);
    clock.advance(Duration::from_secs(1));
    c.record(Outcome::Answered(MS), 1);
    assert_eq!(c.state().windows, 1);
}

#[test]
fn threads_recording_at_once_close_each_window_once() {
    let (clock, c) = controller(Config::default());
    let c = Arc::new(c);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let outcome = if i % 50 == 0 {
                        Outcome::Failed
                    } else {
                        Outcome::Answered(10 * MS + t)
                    };
                    if let Some(limit) = c.record(outcome, 1 + i % 40) {
                        assert!((4..=1000).contains(&limit));
                    }
                }
            })
        })
        .collect();
    let mut ticks = 0;
    while threads.iter().any(|t| !t.is_finished()) {
        clock.advance(Duration::from_millis(100));
        ticks += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    for t in threads {
        t.join().unwrap();
    }
    let s = c.state();
    assert!(s.windows <= ticks && (4..=1000).contains(&s.limit), "{s:?}");
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Step {
    Sample {
        advance_ms: u64,
        rtt_ms: Option<u64>,
        inflight: u32,
    },
    Pin(Option<u32>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        20 => (0..300u64, prop::option::weighted(0.8, 0..5_000u64), 0..2_000u32).prop_map(
            |(advance_ms, rtt_ms, inflight)| Step::Sample { advance_ms, rtt_ms, inflight }
        ),
        1 => prop::option::of(0..3_000u32).prop_map(Step::Pin),
    ]
}

proptest! {
    #[test]
    fn the_limit_stays_within_the_bounds_unless_pinned(
        min in 1..50u32,
        span in 0..500u32,
        steps in prop::collection::vec(step(), 1..400),
    ) {
        let config = Config::with_bounds(min, min + span).unwrap();
        let (clock, c) = controller(config);
        let bounds = min..=min + span;
        let mut pinned = None;
        for s in steps {
            match s {
                Step::Sample { advance_ms, rtt_ms, inflight } => {
                    clock.advance(Duration::from_millis(advance_ms));
                    let outcome = rtt_ms.map_or(Outcome::Failed, |ms| Outcome::Answered(ms * MS));
                    let changed = c.record(outcome, inflight);
                    if let Some(p) = pinned {
                        prop_assert_eq!(changed, None);
                        prop_assert_eq!(c.limit(), p);
                    } else if let Some(limit) = changed {
                        prop_assert!(bounds.contains(&limit));
                    }
                }
                Step::Pin(p) => {
                    let now = c.pin(p);
                    pinned = p.map(|n| n.max(1));
                    prop_assert_eq!(now, pinned.unwrap_or(now));
                }
            }
            if pinned.is_none() {
                prop_assert!(bounds.contains(&c.limit()), "{:?}", c.state());
            }
            prop_assert_eq!(c.state().limit, c.limit());
        }
    }
}

#[test]
fn after_a_busy_window_one_transaction_in_four_is_wanted() {
    let (clock, c) = controller(Config::default());
    // A quiet window: every transaction is wanted, and the next too.
    assert_eq!((0..100).filter(|_| c.wants_sample()).count(), 100);
    close_window(&clock, &c, 10 * MS, 1);
    assert_eq!((0..100).filter(|_| c.wants_sample()).count(), 100);
    // A window of 640 transactions: one in four, evenly, from the next.
    for _ in 0..639 {
        c.record(Outcome::Answered(10 * MS), 1);
    }
    close_window(&clock, &c, 10 * MS, 1);
    let wanted: Vec<bool> = (0..400).map(|_| c.wants_sample()).collect();
    assert_eq!(wanted.iter().filter(|w| **w).count(), 100);
    // Evenly: never more than four skipped in a row.
    assert!(wanted.windows(5).all(|w| w.contains(&true)));
    // 160 samples taken at one in four are a busy window still; 100 not
    // (`close_window` adds the few that close it).
    for _ in 0..159 {
        c.record(Outcome::Answered(10 * MS), 1);
    }
    close_window(&clock, &c, 10 * MS, 1);
    assert!((24..=26).contains(&(0..100).filter(|_| c.wants_sample()).count()));
    for _ in 0..100 {
        c.record(Outcome::Answered(10 * MS), 1);
    }
    close_window(&clock, &c, 10 * MS, 1);
    assert_eq!((0..100).filter(|_| c.wants_sample()).count(), 100);
}

/// The misses of a regular mix (one transaction in `period` goes to the
/// origin, the others are cache hits) get their share too, whatever the
/// mix's period and phase: a counter's remainder would measure all or none.
#[test]
fn the_share_does_not_fall_in_step_with_a_regular_mix() {
    for period in 1..=16u32 {
        for phase in 0..period {
            let misses = (0..4000u32).filter(|n| n % period == phase);
            let (all, wanted) = misses.fold((0, 0), |(a, w), n| (a + 1, w + u32::from(picked(n))));
            let share = f64::from(wanted) / f64::from(all);
            assert!(
                (0.2..=0.3).contains(&share),
                "period {period}, phase {phase}: {wanted} of {all}"
            );
        }
    }
}

/// Records `rtt` answers at `inflight` until a window closes (the clock
/// moved past its due time first); at most 100.
fn close_window(clock: &ManualClock, c: &Controller<Arc<ManualClock>>, rtt: Nanos, inflight: u32) {
    let windows = c.state().windows;
    clock.advance(Duration::from_secs(1));
    for _ in 0..100 {
        c.record(Outcome::Answered(rtt), inflight);
        if c.state().windows > windows {
            return;
        }
    }
    panic!("no window closed");
}

#[test]
fn a_probe_learns_only_from_requests_sent_after_it_started() {
    let (clock, c) = controller(Config::default());
    // A loaded first window: no baseline, so a probe starts at the minimum.
    close_window(&clock, &c, 200 * MS, 20);
    assert!(c.state().probing);
    assert_eq!(c.limit(), 4);
    // Its first window (the drain) goes by; in the second, the crowd sent
    // before the probe ends alone (3 in flight), 1.5 s after it was sent:
    // not the no-load latency, though few are in flight at its close.
    close_window(&clock, &c, 50 * MS, 2);
    clock.advance(Duration::from_millis(100));
    for _ in 0..8 {
        c.record(Outcome::Answered(1500 * MS), 3);
    }
    // Then requests sent since answer in 50 ms, until the probe has its 20.
    for _ in 0..10 {
        if !c.state().probing {
            break;
        }
        close_window(&clock, &c, 50 * MS, 2);
    }
    let s = c.state();
    assert!(!s.probing);
    assert_eq!(s.baseline, Some(50 * MS), "{s:?}");
}
