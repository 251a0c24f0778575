use super::*;
use limits::{NANOS_PER_MS, NANOS_PER_SEC};

const MS: Nanos = NANOS_PER_MS;

/// A window of `n` answered samples of `rtt`, the most in flight `inflight`.
fn loaded(n: u32, rtt: Nanos, inflight: u32) -> Stats {
    Stats {
        answered: n,
        rtt_sum: u64::from(n) * rtt,
        max_inflight: inflight,
        ..Stats::default()
    }
}

/// The same, all unloaded.
fn unloaded(n: u32, rtt: Nanos, inflight: u32) -> Stats {
    Stats {
        unloaded: n,
        unloaded_sum: u64::from(n) * rtt,
        ..loaded(n, rtt, inflight)
    }
}

/// A law at `limit` with a baseline of 10 ms, measured at 0.
fn measured(cfg: &Config, limit: f64) -> Law {
    let mut law = Law::new(cfg, 0);
    law.close(cfg, &unloaded(10, 10 * MS, 4), 0);
    law.estimate = limit;
    law
}

#[test]
fn a_loaded_start_probes_at_the_minimum_then_goes_back() {
    let cfg = Config::default();
    let mut law = Law::new(&cfg, 0);
    assert_eq!((law.limit(&cfg), law.baseline()), (20, None));
    law.close(&cfg, &loaded(20, 25 * MS, 20), 100 * MS);
    assert!(law.probing());
    assert_eq!(law.limit(&cfg), cfg.min);
    // The drain: requests sent before the probe, and the short unloaded
    // ones that ended first, which do not count.
    let drain = Stats {
        unloaded: 10,
        unloaded_sum: 10 * 5 * MS,
        ..loaded(30, 20 * MS, 20)
    };
    law.close(&cfg, &drain, 200 * MS);
    assert!(law.probing());
    // Then twice `min_samples` unloaded samples, over windows.
    law.close(&cfg, &unloaded(12, 10 * MS, 4), 300 * MS);
    assert!(law.probing());
    law.close(&cfg, &unloaded(8, 13 * MS, 4), 400 * MS);
    assert!(!law.probing());
    let mean = (12 * 10 + 8 * 13) * MS / 20;
    assert_eq!((law.limit(&cfg), law.baseline()), (20, Some(mean)));
}

#[test]
fn a_probe_without_its_unloaded_samples_gives_up_with_what_it_has() {
    let cfg = Config::default();
    let mut law = Law::new(&cfg, 0);
    for i in 1..=PROBE_WINDOWS {
        law.close(&cfg, &loaded(20, 25 * MS, 20), u64::from(i) * 100 * MS);
        assert!(law.probing());
    }
    law.close(&cfg, &loaded(20, 30 * MS, 20), NANOS_PER_SEC);
    assert!(!law.probing());
    assert_eq!((law.limit(&cfg), law.baseline()), (20, Some(30 * MS)));
    // A later probe short of samples takes the few it has, halfway.
    law.start_probe();
    for i in 1..PROBE_WINDOWS {
        law.close(&cfg, &unloaded(2, 10 * MS, 4), u64::from(10 + i) * 100 * MS);
    }
    assert!(law.probing());
    law.close(&cfg, &loaded(20, 30 * MS, 20), 2 * NANOS_PER_SEC);
    assert_eq!((law.probing(), law.baseline()), (false, Some(20 * MS)));
}

#[test]
fn unloaded_samples_measure_the_baseline_without_a_probe() {
    let cfg = Config::default();
    let mut law = Law::new(&cfg, 0);
    law.close(&cfg, &unloaded(10, 12 * MS, 3), 100 * MS);
    assert!(!law.probing());
    assert_eq!(law.baseline(), Some(12 * MS));
    // Too few unloaded samples (under half the window's) do not count.
    let few = Stats {
        unloaded: cfg.unloaded_samples() - 1,
        unloaded_sum: 4 * 30 * MS,
        ..loaded(10, 12 * MS, 8)
    };
    law.close(&cfg, &few, 200 * MS);
    assert_eq!(law.baseline(), Some(12 * MS));
    // Each later unloaded measurement moves it halfway, up or down.
    law.close(&cfg, &unloaded(10, 20 * MS, 3), 300 * MS);
    assert_eq!(law.baseline(), Some(16 * MS));
    law.close(&cfg, &unloaded(10, 8 * MS, 3), 400 * MS);
    assert_eq!(law.baseline(), Some(12 * MS));
}

#[test]
fn the_baseline_follows_a_faster_loaded_window_down_never_up() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 40.0);
    law.close(&cfg, &loaded(10, 8 * MS, 40), 100 * MS);
    assert_eq!(law.baseline(), Some(8 * MS));
    law.close(&cfg, &loaded(10, 30 * MS, 40), 200 * MS);
    assert_eq!(
        (law.baseline(), law.recent()),
        (Some(8 * MS), Some(30 * MS))
    );
}

#[test]
fn queueing_lowers_the_limit_by_the_smoothed_gradient() {
    let cfg = Config::default();
    // RTT 12.5 ms over 10: g = 0.8, target 0.8·40 + √40 ≈ 38.3.
    let mut law = measured(&cfg, 40.0);
    law.close(&cfg, &loaded(10, 12_500_000, 40), 100 * MS);
    let target = 0.8 * 40.0 + 40f64.sqrt();
    assert!((law.estimate - (0.8 * 40.0 + 0.2 * target)).abs() < 1e-9);
    // Ten times the baseline: the gradient's floor, at most 10 % a window.
    let mut law = measured(&cfg, 400.0);
    law.close(&cfg, &loaded(10, 100 * MS, 400), 100 * MS);
    assert!((law.estimate - (0.8 * 400.0 + 0.2 * (200.0 + 20.0))).abs() < 1e-9);
}

#[test]
fn queueing_applies_to_the_concurrency_in_use() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 1000.0);
    law.close(&cfg, &loaded(10, 20 * MS, 79), 100 * MS);
    // From 80 in use, not from 1000.
    let target = 0.5 * 80.0 + 80f64.sqrt();
    assert!((law.estimate - (0.8 * 80.0 + 0.2 * target)).abs() < 1e-9);
}

#[test]
fn the_queue_allowance_is_the_square_root_at_most_a_quarter() {
    assert_eq!(queue_allowance(4.0), 1.0);
    assert_eq!(queue_allowance(8.0), 2.0);
    assert_eq!(queue_allowance(16.0), 4.0);
    assert_eq!(queue_allowance(100.0), 10.0);
}

#[test]
fn no_queueing_grows_by_at_least_one_a_window() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 20.0);
    law.close(&cfg, &loaded(10, 10 * MS, 20), 100 * MS);
    assert_eq!(law.estimate, 21.0);
    let mut law = measured(&cfg, 400.0);
    law.close(&cfg, &loaded(10, 10 * MS, 400), 100 * MS);
    assert_eq!(law.estimate, 404.0);
}

#[test]
fn application_limited_windows_never_grow_and_drift_toward_twice_the_demand() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 100.0);
    law.close(&cfg, &loaded(10, 10 * MS, 10), 100 * MS);
    assert_eq!(law.estimate, 100.0 - 0.2 * (100.0 - 20.0));
    // Queueing while application-limited: no growth either.
    let mut law = measured(&cfg, 10.0);
    law.close(&cfg, &loaded(10, 11 * MS, 4), 100 * MS);
    assert!(law.estimate <= 10.0);
    for i in 2..100 {
        law.close(&cfg, &loaded(10, 10 * MS, 1), i * 100 * MS);
    }
    assert_eq!(law.limit(&cfg), cfg.min);
}

#[test]
fn a_failing_window_backs_off_once_from_the_concurrency_in_use() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 50.0);
    // 10 % failed, the rest answered fast: still a back-off, no growth.
    let failing = Stats {
        failed: 1,
        ..loaded(9, 10 * MS, 40)
    };
    law.close(&cfg, &failing, 100 * MS);
    assert!((law.estimate - 40.0 * 0.8).abs() < 1e-9);
    // 9 % is not failing: the answered ones grow it.
    let fine = Stats {
        failed: 1,
        ..loaded(10, 10 * MS, 40)
    };
    law.close(&cfg, &fine, 200 * MS);
    assert!(law.estimate > 33.0);
    let all = Stats {
        failed: 10,
        max_inflight: 40,
        ..Stats::default()
    };
    for i in 3..40 {
        law.close(&cfg, &all, i * 100 * MS);
    }
    assert_eq!(law.limit(&cfg), cfg.min);
    assert_eq!(law.recent(), Some(10 * MS), "a failure is no RTT");
}

#[test]
fn the_bounds_hold() {
    let cfg = Config::with_bounds(5, 30).unwrap();
    let mut law = measured(&cfg, 29.0);
    for i in 1..10 {
        law.close(&cfg, &loaded(10, 10 * MS, 30), i * 100 * MS);
    }
    assert_eq!((law.estimate, law.limit(&cfg)), (30.0, 30));
    for i in 10..100 {
        law.close(&cfg, &loaded(10, 100 * MS, 30), i * 100 * MS);
    }
    assert_eq!((law.estimate, law.limit(&cfg)), (5.0, 5));
}

#[test]
fn a_probe_comes_when_the_baseline_went_unmeasured_for_the_interval() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 40.0);
    let late = cfg.probe_interval;
    law.close(&cfg, &loaded(10, 11 * MS, 40), late - 1);
    assert!(!law.probing());
    law.close(&cfg, &loaded(10, 11 * MS, 40), late);
    assert!(law.probing());
    let restore = law.estimate;
    law.close(&cfg, &loaded(10, 11 * MS, 40), late + 100 * MS);
    law.close(&cfg, &unloaded(20, 12 * MS, 4), late + 200 * MS);
    assert_eq!((law.probing(), law.estimate), (false, restore));
    assert_eq!(law.baseline(), Some(11 * MS));
    // Unloaded samples reset the interval: no probe then.
    law.close(&cfg, &loaded(10, 11 * MS, 40), 2 * late);
    assert!(!law.probing());
    let never = Config {
        probe_interval: 0,
        ..cfg
    };
    let mut law = measured(&never, 40.0);
    law.close(&never, &loaded(10, 11 * MS, 40), 100 * late);
    assert!(!law.probing());
}

#[test]
fn a_pin_holds_outside_the_bounds_and_its_release_learns_from_it() {
    let cfg = Config::default();
    let mut law = Law::new(&cfg, 0);
    law.close(&cfg, &loaded(20, 25 * MS, 20), 100 * MS);
    assert!(law.probing());
    // Pinning ends the probe; the windows still measure.
    law.pin(Some(2000), &cfg);
    assert_eq!((law.limit(&cfg), law.probing()), (2000, false));
    law.close(&cfg, &unloaded(10, 10 * MS, 2), 200 * MS);
    law.close(&cfg, &loaded(10, 100 * MS, 2000), 300 * MS);
    assert_eq!(law.limit(&cfg), 2000);
    assert_eq!(
        (law.baseline(), law.recent()),
        (Some(10 * MS), Some(100 * MS))
    );
    law.pin(Some(0), &cfg);
    assert_eq!(law.pinned(), Some(1));
    law.pin(Some(1), &cfg);
    law.pin(None, &cfg);
    assert_eq!((law.pinned(), law.limit(&cfg)), (None, cfg.min));
    law.pin(Some(2000), &cfg);
    law.pin(None, &cfg);
    assert_eq!(law.limit(&cfg), cfg.max);
    // Releasing what is not pinned changes nothing.
    law.pin(None, &cfg);
    assert_eq!(law.limit(&cfg), cfg.max);
}

#[test]
fn a_window_lasts_twice_the_recent_rtt_within_the_bounds() {
    let cfg = Config::default();
    let mut law = measured(&cfg, 20.0);
    law.recent = None;
    assert_eq!(law.window(&cfg), cfg.min_window);
    for (rtt, window) in [(10, 100), (80, 160), (400, 800), (3000, 1000)] {
        law.recent = Some(rtt * MS);
        assert_eq!(law.window(&cfg), window * MS, "{rtt} ms");
    }
}
