//! One client through the throttler: delays, a ban and its end (by a
//! request, `unban`, a timer), `--max-concurrent`, `--log-only`, and keys
//! (an IPv6 /64, a full table).

use super::*;

#[test]
fn the_timeline_through_the_throttler() {
    let (t, clock) = throttler(&format!("{SMALL} --max-concurrent=2"), &files());
    let r = get("127.0.0.2");
    let d = t.decide(&r);
    assert_eq!((d.action, kinds(&d)), (Action::Pass, vec![]));
    for want in [1, 2, 4, 4] {
        let d = t.decide(&r);
        assert_eq!(d.action, Action::Delay(want * S));
        assert_eq!(kinds(&d), [EventKind::Throttled]);
        assert!(d.delayed.is_some());
        clock.advance(std::time::Duration::from_nanos(want * S + 10 * MS));
        drop(d); // the delay ended
    }
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Ban])
    );
    let ev = d.events[0].unwrap();
    assert_eq!((ev.phase, ev.violations), (Phase::Banned, 4));
    assert_eq!(d.banned_until, Some(clock.now_nanos() + 3 * S));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Banned])
    );
    assert_eq!(t.show(r.client).unwrap().phase, Phase::Banned);
    clock.advance(std::time::Duration::from_secs(3));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Pass, vec![EventKind::Unban])
    );
    assert_eq!(t.show(r.client).unwrap().phase, Phase::Probation);
}

trait NowNanos {
    fn now_nanos(&self) -> u64;
}

impl NowNanos for Arc<ManualClock> {
    fn now_nanos(&self) -> u64 {
        limits::Clock::now(self)
    }
}

#[test]
fn max_concurrent_answers_too_many_and_frees_on_drop() {
    let (t, _) = throttler(&format!("{SMALL} --max-concurrent=1"), &files());
    let r = get("127.0.0.3");
    t.decide(&r);
    let first = t.decide(&r);
    assert_eq!(first.action, Action::Delay(S));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::TooMany, vec![EventKind::Concurrent])
    );
    assert_eq!(t.show(r.client).unwrap().delayed, 1);
    drop(first);
    assert_eq!(t.show(r.client).unwrap().delayed, 0);
    assert_eq!(t.decide(&r).action, Action::Delay(4 * S));
}

#[test]
fn log_only_decides_and_logs_but_always_passes() {
    let (t, _) = throttler(
        &format!("{SMALL} --max-concurrent=9 --log-only --deny-file=deny.txt"),
        &files(),
    );
    let d = t.decide(&get("10.1.1.1"));
    assert_eq!((d.action, d.would), (Action::Pass, Action::Forbid));
    let r = get("127.0.0.8");
    let mut seen = Vec::new();
    let mut held = Vec::new();
    for _ in 0..7 {
        let mut d = t.decide(&r);
        assert_eq!(d.action, Action::Pass);
        seen.push((d.would, kinds(&d)));
        held.extend(d.delayed.take());
    }
    use EventKind::*;
    assert_eq!(
        seen,
        [
            (Action::Pass, vec![]),
            (Action::Delay(S), vec![Throttled]),
            (Action::Delay(2 * S), vec![Throttled]),
            (Action::Delay(4 * S), vec![Throttled]),
            (Action::Delay(4 * S), vec![Throttled]),
            (Action::Forbid, vec![Ban]),
            (Action::Forbid, vec![Banned]),
        ]
    );
    assert_eq!(t.show(r.client).unwrap().delayed, 4);
    drop(held);
    assert_eq!(t.show(r.client).unwrap().delayed, 0);
}

#[test]
fn unban_show_and_expire() {
    let (t, clock) = throttler(
        &format!("{SMALL} --ban-threshold=1 --max-concurrent=9"),
        &files(),
    );
    let r = get("127.0.0.9");
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    let key = d[3].key;
    assert_eq!(t.expire(key), None, "not expired yet");
    let v = t.show(r.client).unwrap();
    assert_eq!((v.phase, v.remaining), (Phase::Banned, 3 * S));
    let e = t.unban(r.client).unwrap();
    assert_eq!((e.kind, e.phase), (EventKind::Unban, Phase::Allowed));
    assert_eq!(t.unban(r.client), None);
    assert_eq!(t.decide(&r).action, Action::Pass);
    // Banned again, then the timer's expire() at the deadline.
    let d: Vec<_> = (0..3).map(|_| t.decide(&r)).collect();
    assert_eq!(d[2].action, Action::Forbid);
    clock.advance(std::time::Duration::from_secs(3));
    assert_eq!(t.expire(d[2].key).map(|e| e.kind), Some(EventKind::Unban));
    assert_eq!(t.expire(d[2].key), None, "logged once");
    assert!(t.show(ip("127.0.0.99")).is_none());
}

#[test]
fn ipv6_clients_share_state_per_64() {
    let (t, _) = throttler(&format!("{SMALL} --max-concurrent=9"), &files());
    assert_eq!(t.decide(&get("2001:db8:1:2::1")).action, Action::Pass);
    assert_eq!(
        t.decide(&get("2001:db8:1:2:ffff::7")).action,
        Action::Delay(S)
    );
    assert_eq!(t.decide(&get("2001:db8:1:3::1")).action, Action::Pass);
    // IPv4-mapped addresses are the IPv4 client.
    assert_eq!(t.decide(&get("127.0.0.10")).action, Action::Pass);
    assert_eq!(t.decide(&get("::ffff:127.0.0.10")).action, Action::Delay(S));
}

#[test]
fn a_full_table_of_busy_ips_passes_new_ones_untracked() {
    let (t, _) = throttler(&format!("{SMALL} --keys=2 --max-concurrent=9"), &files());
    let mut held = Vec::new();
    for a in ["127.0.1.1", "127.0.1.2"] {
        t.decide(&get(a));
        held.push(t.decide(&get(a)));
    }
    let d = t.decide(&get("127.0.1.3"));
    assert!(d.untracked);
    assert_eq!(d.action, Action::Pass);
    drop(held);
    // Idle IPs are evicted to make room (and forgotten: allowed again).
    let d = t.decide(&get("127.0.1.3"));
    assert!(!d.untracked);
}

#[test]
fn a_timer_a_hair_early_ends_only_the_ban_it_was_armed_for() {
    let (t, clock) = throttler(
        &format!("{SMALL} --ban-threshold=1 --max-concurrent=9"),
        &files(),
    );
    let r = get("127.0.0.9");
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    let key = d[3].key;
    let ends = limits::Clock::now(&clock) + 3 * S;
    // 2 ms before the end, a timer armed for it ends the ban.
    clock.advance(std::time::Duration::from_millis(2998));
    assert_eq!(t.expire(key), None, "the real clock says not yet");
    assert_eq!(
        t.expire_by(key, ends).map(|e| e.kind),
        Some(EventKind::Unban)
    );
    // Banned again: a timer armed for the old end does not end the new ban.
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    assert_eq!(t.expire_by(key, ends), None);
    assert_eq!(t.show(r.client).map(|v| v.phase), Some(Phase::Banned));
}
