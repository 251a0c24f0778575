use proptest::prelude::*;

use super::{MS, S};
use crate::state::{IpState, Params, Phase, Step};

/// The timeline values.
fn small() -> Params {
    Params {
        initial_delay: S,
        max_delay: 4 * S,
        threshold: S,
        max_concurrent: 100,
        ban_threshold: 3,
        ban_expiration: 3 * S,
    }
}

fn req(s: &mut IpState, now: u64, p: &Params) -> Step {
    s.advance(now, p);
    s.request(now, p)
}

#[test]
fn allowed_then_probation_then_throttled() {
    let p = small();
    let mut s = IpState::default();
    assert_eq!(s.phase(), Phase::Allowed);
    assert_eq!(req(&mut s, 10 * S, &p), Step::Pass);
    assert_eq!(s.phase(), Phase::Probation);
    assert_eq!(req(&mut s, 10 * S + 100 * MS, &p), Step::Delay(S));
    assert_eq!(
        (s.phase(), s.delay(), s.violations()),
        (Phase::Throttled, S, 0)
    );
}

#[test]
fn probation_returns_to_allowed_after_threshold() {
    let p = small();
    let mut s = IpState::default();
    req(&mut s, 10 * S, &p);
    s.advance(11 * S - 1, &p);
    assert_eq!(s.phase(), Phase::Probation);
    s.advance(11 * S, &p);
    assert_eq!(s.phase(), Phase::Allowed);
    assert_eq!(req(&mut s, 11 * S, &p), Step::Pass);
}

/// The timeline: a client that sends each request when the
/// previous one was answered gets 0, 1, 2, 4, 4 s, then a ban (403) for 3 s,
/// then is allowed again.
/// With `threshold = 0` every request finds the IP allowed, also one whose
/// clock reading is a little older than the probation it finds (parallel
/// requests of one IP race for its lock after reading the clock).
#[test]
fn zero_threshold_allows_a_request_stamped_before_the_probation() {
    let p = Params {
        threshold: 0,
        ..small()
    };
    let mut s = IpState::default();
    assert_eq!(req(&mut s, 10 * S, &p), Step::Pass);
    assert_eq!(req(&mut s, 10 * S - 1000, &p), Step::Pass);
    assert_eq!(req(&mut s, 10 * S, &p), Step::Pass);
    assert_eq!(s.violations(), 0);
    // A positive threshold is unchanged by it: still probation, so delayed.
    let p = small();
    let mut s = IpState::default();
    assert_eq!(req(&mut s, 10 * S, &p), Step::Pass);
    assert_eq!(req(&mut s, 10 * S - 1000, &p), Step::Delay(S));
}

#[test]
fn sequential_client_escalates_to_a_ban_and_is_allowed_after_it() {
    let p = small();
    let mut s = IpState::default();
    let mut now = 100 * S;
    let mut delays = Vec::new();
    for _ in 0..5 {
        match req(&mut s, now, &p) {
            Step::Pass => delays.push(0),
            Step::Delay(d) => {
                delays.push(d / S);
                now += d;
                s.undelay();
            }
            other => panic!("unexpected {other:?}"),
        }
        now += 10 * MS;
    }
    assert_eq!(delays, [0, 1, 2, 4, 4]);
    assert_eq!(s.violations(), 3);
    assert_eq!(req(&mut s, now, &p), Step::Ban);
    assert_eq!(s.phase(), Phase::Banned);
    let banned_at = now;
    assert_eq!(req(&mut s, banned_at + S, &p), Step::Banned);
    assert_eq!(req(&mut s, banned_at + 3 * S - 1, &p), Step::Banned);
    assert!(s.advance(banned_at + 3 * S, &p), "the ban ends: an unban");
    assert_eq!(
        (s.phase(), s.violations(), s.delay()),
        (Phase::Allowed, 0, 0)
    );
    assert_eq!(req(&mut s, banned_at + 3 * S, &p), Step::Pass);
}

#[test]
fn throttled_returns_to_probation_after_delay_without_requests_and_resets() {
    let p = small();
    let mut s = IpState::default();
    req(&mut s, 0, &p);
    assert_eq!(req(&mut s, 0, &p), Step::Delay(S));
    assert_eq!(req(&mut s, 10 * MS, &p), Step::Delay(2 * S));
    // The latest connection's delay ends at 2.01 s; throttling lasts `delay`
    // (2 s) more without requests.
    s.advance(4 * S, &p);
    assert_eq!(s.phase(), Phase::Throttled);
    s.advance(4 * S + 10 * MS, &p);
    assert_eq!(
        (s.phase(), s.violations(), s.delay()),
        (Phase::Probation, 0, 0)
    );
    // Probation from the end of throttling: allowed `threshold` later.
    s.advance(5 * S + 10 * MS, &p);
    assert_eq!(s.phase(), Phase::Allowed);
}

#[test]
fn only_the_latest_connection_ends_throttling() {
    let p = small();
    let mut s = IpState::default();
    req(&mut s, 0, &p);
    req(&mut s, 0, &p); // delayed 1 s: until 1 s
                        // Another at 0.5 s: delay 2 s, until 2.5 s; throttled until 4.5 s.
    assert_eq!(req(&mut s, 500 * MS, &p), Step::Delay(2 * S));
    // The first connection's delay ended long ago; still throttled.
    s.advance(4 * S, &p);
    assert_eq!((s.phase(), s.violations()), (Phase::Throttled, 1));
    s.advance(4500 * MS, &p);
    assert_eq!(s.phase(), Phase::Probation);
}

#[test]
fn max_concurrent_refuses_beyond_and_counts_only_delayed() {
    let p = Params {
        max_concurrent: 2,
        ..small()
    };
    let mut s = IpState::default();
    assert_eq!(req(&mut s, 0, &p), Step::Pass); // not delayed: not counted
    assert_eq!(req(&mut s, 0, &p), Step::Delay(S));
    assert_eq!(req(&mut s, 0, &p), Step::Delay(2 * S));
    assert_eq!(req(&mut s, 0, &p), Step::TooMany);
    assert_eq!(s.delayed(), 2);
    s.undelay(); // one delay ended: room for one more
    assert_eq!(req(&mut s, 0, &p), Step::Delay(4 * S));
}

#[test]
fn a_flood_of_refused_requests_still_escalates_to_a_ban() {
    let p = Params {
        max_concurrent: 0,
        ..small()
    };
    let mut s = IpState::default();
    let steps: Vec<Step> = (0..6).map(|_| req(&mut s, 0, &p)).collect();
    assert_eq!(
        steps,
        [
            Step::Pass,
            Step::TooMany,
            Step::TooMany,
            Step::TooMany,
            Step::TooMany,
            Step::Ban
        ]
    );
}

#[test]
fn a_dropped_connection_does_not_change_the_delay() {
    let p = small();
    let mut s = IpState::default();
    req(&mut s, 0, &p);
    assert_eq!(req(&mut s, 0, &p), Step::Delay(S));
    s.undelay(); // the client dropped during its delay
    assert_eq!((s.delay(), s.violations()), (S, 0));
    assert_eq!(req(&mut s, 300 * MS, &p), Step::Delay(2 * S));
}

#[test]
fn ban_threshold_zero_never_bans() {
    let p = Params {
        ban_threshold: 0,
        ..small()
    };
    let mut s = IpState::default();
    for i in 0..100 {
        let step = req(&mut s, i * MS, &p);
        assert!(matches!(step, Step::Pass | Step::Delay(_)), "{step:?}");
        s.undelay();
    }
    assert_eq!(s.delay(), 4 * S);
}

#[test]
fn unban_lifts_a_ban_at_once() {
    let p = small();
    let mut s = IpState::default();
    s.ban(0, 3 * S);
    assert!(s.busy());
    assert!(s.unban());
    assert!(!s.unban());
    assert_eq!(s.phase(), Phase::Allowed);
    assert!(!s.busy());
    assert_eq!(req(&mut s, MS, &p), Step::Pass);
}

#[test]
fn view_does_not_change_the_state() {
    let p = small();
    let mut s = IpState::default();
    req(&mut s, 0, &p);
    req(&mut s, 0, &p);
    let before = s;
    let v = s.view(10 * S, &p);
    assert_eq!(v.phase, Phase::Allowed);
    assert_eq!(s, before);
    let v = s.view(500 * MS, &p);
    assert_eq!((v.phase, v.delay, v.delayed), (Phase::Throttled, S, 1));
    assert_eq!(v.remaining, 1500 * MS);
}

fn params() -> impl Strategy<Value = Params> {
    (
        1..5_000u64,
        1..4u64,
        0..5_000u64,
        0..5u32,
        0..6u32,
        1..10_000u64,
    )
        .prop_map(|(init, mult, thr, mc, bt, be)| Params {
            initial_delay: init * MS,
            max_delay: init * MS * mult + 7 * MS,
            threshold: thr * MS,
            max_concurrent: mc,
            ban_threshold: bt,
            ban_expiration: be * MS,
        })
}

/// A run of events: (gap before it in ms, request?, undelay one?).
fn ops() -> impl Strategy<Value = Vec<(u64, bool, bool)>> {
    prop::collection::vec((0..3_000u64, any::<bool>(), any::<bool>()), 0..200)
}

#[test]
fn a_state_names_its_client_in_40_bytes() {
    assert_eq!(std::mem::size_of::<IpState>(), 40);
    assert_eq!(IpState::default().holder(), None);
    for c in ["192.0.2.7", "2001:db8::1", "::"] {
        let c = crate::Client::Addr(c.parse().unwrap());
        let mut s = IpState::default();
        s.hold(c);
        assert_eq!(s.holder(), Some(c));
        // Named once: another address of its prefix leaves the name.
        s.hold(crate::Client::Unknown);
        assert_eq!(s.holder(), Some(c));
    }
    let mut s = IpState::default();
    s.hold(crate::Client::Unknown);
    assert_eq!(s.holder(), Some(crate::Client::Unknown));
    // The shared record's step keeps whose state it is.
    let p = small();
    let other = IpState::default();
    assert_eq!(
        s.adopt(&other, false).holder(),
        Some(crate::Client::Unknown)
    );
    let shared = s.with_shared(Phase::Banned, 5 * S, 0, 4);
    assert_eq!(shared.holder(), Some(crate::Client::Unknown));
    assert_eq!(shared.view(S, &p).phase, Phase::Banned);
}

proptest! {
    /// Whatever the traffic: the delay never exceeds max_delay, a ban comes
    /// only after more than ban_threshold violations (and never with 0),
    /// and the delayed count never exceeds max_concurrent.
    #[test]
    fn invariants_hold_for_any_traffic(p in params(), ops in ops()) {
        let mut s = IpState::default();
        let mut now = 1_000 * S;
        let mut delayed = 0u32;
        for (gap, is_req, undelay) in ops {
            now += gap * MS;
            s.advance(now, &p);
            if is_req {
                let before = s.violations();
                let phase_before = s.phase();
                let step = s.request(now, &p);
                if let Step::Delay(_) = step { delayed += 1; }
                if step == Step::Ban {
                    prop_assert!(p.ban_threshold > 0);
                    prop_assert_eq!(phase_before, Phase::Throttled);
                    prop_assert!(before + 1 > p.ban_threshold);
                }
            }
            if undelay && delayed > 0 {
                delayed -= 1;
                s.undelay();
            }
            prop_assert!(s.delay() <= p.max_delay);
            prop_assert!(s.delayed() <= p.max_concurrent);
            prop_assert_eq!(s.delayed(), delayed);
            if s.phase() == Phase::Banned {
                prop_assert!(p.ban_threshold > 0 && s.violations() > p.ban_threshold);
            }
            if s.phase() != Phase::Throttled && s.phase() != Phase::Banned {
                prop_assert_eq!((s.delay(), s.violations()), (0, 0));
            }
        }
    }

    /// Idle long enough (ban + two max delays + threshold), any state
    /// returns to allowed with nothing left.
    #[test]
    fn idle_always_returns_to_allowed(p in params(), ops in ops()) {
        let mut s = IpState::default();
        let mut now = 1_000 * S;
        for (gap, is_req, _) in ops {
            now += gap * MS;
            s.advance(now, &p);
            if is_req {
                s.request(now, &p);
            }
        }
        let idle = p.ban_expiration + 2 * p.max_delay + p.threshold + 1;
        s.advance(now + idle, &p);
        prop_assert_eq!(s.phase(), Phase::Allowed);
        prop_assert_eq!((s.delay(), s.violations()), (0, 0));
    }

    /// A sequential client (each request after the previous delay) sees
    /// delays initial, 2x, 4x ... capped at max_delay, and is banned at
    /// exactly violation ban_threshold + 1.
    #[test]
    fn a_sequential_client_doubles_then_is_banned(p in params()) {
        // Requests come 0.5 ms apart: with a shorter threshold the client
        // is back to allowed before each one (Perlbal's semantics), never throttled.
        prop_assume!(p.threshold > MS / 2);
        let mut s = IpState::default();
        let mut now = 1_000 * S;
        prop_assert_eq!(req(&mut s, now, &p), Step::Pass);
        let mut expect = p.initial_delay.min(p.max_delay);
        let mut n = 0u32;
        loop {
            now += MS / 2;
            let step = req(&mut s, now, &p);
            if p.ban_threshold > 0 && n == p.ban_threshold + 1 {
                prop_assert_eq!(step, Step::Ban);
                break;
            }
            if p.max_concurrent == 0 {
                prop_assert_eq!(step, Step::TooMany);
            } else {
                prop_assert_eq!(step, Step::Delay(expect));
                now += expect;
                s.undelay();
            }
            expect = (expect * 2).min(p.max_delay);
            n += 1;
            if n > 12 { break; }
        }
    }
}
