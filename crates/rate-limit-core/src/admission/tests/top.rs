//! `usage` and `top`: what keys hold; the best N keys, found with a bounded
//! heap, match a full sort.

use std::sync::Arc;

use limits::{ManualClock, Permit, NANOS_PER_SEC};

use super::*;

/// A waiter that is never queued here (every request goes or is refused).
struct Never;

impl Waiter for Never {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

#[test]
fn top_returns_the_n_busiest_keys_in_order() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let limits = Limits {
        limit: Some(100),
        rate: None,
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let l: Arc<Limiter<Never, _>> = Limiter::keyed(limits, 4096, clock);
    // Key k holds (k * 37) % 11 slots: many ties, many idle keys.
    let mut held = Vec::new();
    let mut want: Vec<(u32, u64)> = Vec::new();
    for k in 1..=600u64 {
        let m = ((k * 37) % 11) as u32;
        for _ in 0..m {
            match l.admit_key(k) {
                Admission::Go(Some(p)) => held.push(p),
                _ => panic!("key {k} is under its limit"),
            }
        }
        if m > 0 {
            want.push((m, k));
        }
    }
    // Most slots first, then the smaller key.
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for n in [0, 1, 7, 54, 55, 56, 200, want.len(), 1000] {
        let got: Vec<(u32, u64)> = l.top(n).iter().map(|k| (k.active, k.key)).collect();
        let expected: Vec<(u32, u64)> = want.iter().copied().take(n).collect();
        assert_eq!(got, expected, "top {n}");
    }
    assert!(want.len() < 600, "idle keys are left out");
    drop(held);
    assert!(l.top(10).is_empty(), "no key holds anything any more");
}

#[test]
fn usage_and_top_report_what_keys_hold() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let l: Arc<Limiter<W, _>> =
        Limiter::keyed(lim(Some(1), Some((1.0, 1)), 10, 0), 100, clock.clone());
    let held: Held = Arc::default();
    let Admission::Go(Some(p)) = l.admit_key(7) else {
        panic!("first request of 7 goes")
    };
    clock.advance(Duration::from_secs(2));
    let _t = queue_waiters(&l, Some(7), 1, 1, &held);
    // Key 9 uses its token: over its rate for a second.
    let Admission::Go(Some(q)) = l.admit_key(9) else {
        panic!("9 goes")
    };
    drop(q);
    assert_eq!(
        l.usage(),
        Usage {
            active: 1,
            waiting: 1,
            keys: Some(2),
            evicted: Some(0)
        }
    );
    let top = l.top(10);
    assert_eq!(top.len(), 2);
    assert_eq!((top[0].key, top[0].active, top[0].waiting), (7, 1, 1));
    assert_eq!((top[1].key, top[1].over_rate), (9, NANOS_PER_SEC));
    assert_eq!(l.top(1).len(), 1);
    let rule: Arc<Limiter<W, _>> = Limiter::new(lim(Some(2), None, 10, 0), clock);
    let r = rule.admit_rule();
    assert_eq!(rule.usage().active, 1);
    assert!(rule.top(5).is_empty());
    drop((p, r));
}
