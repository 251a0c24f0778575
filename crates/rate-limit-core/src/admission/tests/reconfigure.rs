//! `reconfigure`: a live limiter takes new limits.

use super::*;

#[test]
fn reconfigure_raises_a_live_limit_and_admits_waiters_at_once() {
    let (l, _) = limiter(lim(Some(1), None, 10, 0));
    let held: Held = Arc::default();
    let Admission::Go(Some(p)) = l.admit_rule() else {
        panic!("first request must get the slot")
    };
    let _tickets = queue_waiters(&l, None, 1, 3, &held);
    l.reconfigure(lim(Some(3), None, 10, 0)).unwrap();
    let ids: Vec<usize> = held.lock().iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, [1, 2], "FIFO order, as many as the new limit allows");
    assert_eq!(l.limits().limit, Some(3));
    // Lowered: nobody is preempted; the freed slot is not handed on.
    l.reconfigure(lim(Some(1), None, 10, 0)).unwrap();
    drop(p);
    assert_eq!(held.lock().len(), 2);
    assert_eq!(l.slots().map(|s| s.active()), Some(2));
    // The shape (a limit, a rate) cannot change live.
    assert_eq!(
        l.reconfigure(lim(None, Some((1.0, 1)), 10, 0)),
        Err("--limit")
    );
    assert_eq!(
        l.reconfigure(lim(Some(1), Some((1.0, 1)), 10, 0)),
        Err("--rate")
    );
}

#[test]
fn reconfigure_changes_every_key_and_the_rate_keeps_each_level() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let l: Arc<Limiter<W, _>> =
        Limiter::keyed(lim(Some(1), Some((1.0, 2)), 10, 0), 100, clock.clone());
    let held: Held = Arc::default();
    let (a, b) = (1u64, 2u64);
    let Admission::Go(Some(pa)) = l.admit_key(a) else {
        panic!("a's first request must go")
    };
    let _ta = queue_waiters(&l, Some(a), 10, 1, &held);
    // b empties its bucket (burst 2).
    for _ in 0..2 {
        let Admission::Go(Some(p)) = l.admit_key(b) else {
            panic!("b within its burst")
        };
        drop(p);
    }
    assert!(matches!(
        l.admit_key(b),
        Admission::Wait(_) | Admission::Reject(_)
    ));
    l.reconfigure(lim(Some(2), Some((100.0, 200)), 10, 0))
        .unwrap();
    assert_eq!(
        held.lock().len(),
        1,
        "a's waiter got the raised per-key limit"
    );
    // b's bucket was 2 s behind (empty at 1/s, burst 2): it stays 2 s
    // behind, which at 100/s with burst 200 is 10 ms from conforming.
    let (slots_left, quota) = l.remaining(Some(b));
    assert_eq!(slots_left, Some(2));
    assert_eq!(
        quota.map(|q| (q.remaining, q.replenish_in)),
        Some((0, 10 * NANOS_PER_MS))
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(l.remaining(Some(b)).1.map(|q| q.remaining), Some(200));
    // A key first seen after the change gets the new limit.
    let c = 3u64;
    let p1 = l.admit_key(c);
    let p2 = l.admit_key(c);
    assert!(matches!(
        (&p1, &p2),
        (Admission::Go(Some(_)), Admission::Go(Some(_)))
    ));
    drop((pa, p1, p2));
}
