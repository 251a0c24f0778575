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
