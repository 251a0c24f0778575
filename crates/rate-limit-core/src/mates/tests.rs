use super::*;
use limits::{Permit, Slots};
use parking_lot::Mutex;
use std::sync::Arc;

type Held = Arc<Mutex<Vec<(usize, Permit<W>)>>>;

struct W(usize, Held);

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        self.1.lock().push((self.0, permit));
        Ok(())
    }
}

fn ids(v: Vec<W>) -> Vec<usize> {
    let mut ids: Vec<usize> = v.into_iter().map(|w| w.0).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn takes_exactly_the_sessions_waiters_of_that_limiter() {
    let held = Held::default();
    let (a, b) = (Slots::new(1), Slots::new(1));
    let pa = a.try_acquire().expect("free");
    let pb = b.try_acquire().expect("free");
    // Other clients fill A's queue; this session waits in A and in B.
    let others: Vec<_> = (100..1100).map(|i| a.enqueue(W(i, held.clone()))).collect();
    let mut m = Mates::default();
    for i in 0..3 {
        assert!(m.add(1, &a.enqueue(W(i, held.clone()))));
    }
    assert!(m.add(2, &b.enqueue(W(10, held.clone()))));
    assert_eq!(ids(m.take(1)), [0, 1, 2]);
    assert_eq!(a.waiting(), 1000, "the other clients keep their places");
    assert!(others.iter().all(Ticket::is_waiting));
    assert!(m.take(1).is_empty(), "forgotten");
    assert_eq!(ids(m.take(2)), [10]);
    assert_eq!(m.len(), 0);
    drop((pa, pb));
    assert_eq!(held.lock()[0].0, 100, "A's head got the slot");
}

#[test]
fn waiters_that_left_are_skipped_and_pruned() {
    let held = Held::default();
    let s = Slots::new(1);
    let p = s.try_acquire().expect("free");
    let mut m = Mates::default();
    let first = s.enqueue(W(0, held.clone()));
    m.add(1, &first);
    let cancelled = s.enqueue(W(1, held.clone()));
    m.add(1, &cancelled);
    assert!(cancelled.cancel().is_some());
    m.add(1, &s.enqueue(W(2, held.clone())));
    // The head is admitted: it is no longer this session's to take.
    drop(p);
    assert_eq!(held.lock()[0].0, 0);
    assert_eq!(ids(m.take(1)), [2]);

    // A session whose waiters come and go keeps a short list.
    let mut m = Mates::default();
    for i in 0..10 * MAX_MATES {
        let t = s.enqueue(W(i, held.clone()));
        assert!(m.add(1, &t), "the list keeps room: {i}");
        assert!(t.cancel().is_some());
        assert!(m.len() <= 2 * PRUNE_MIN, "{} entries", m.len());
    }
}

#[test]
fn bounded_at_max_mates_live_waiters() {
    let held = Held::default();
    let s = Slots::new(0);
    let mut m = Mates::default();
    let tickets: Vec<_> = (0..MAX_MATES)
        .map(|i| {
            let t = s.enqueue(W(i, held.clone()));
            assert!(m.add(1, &t));
            t
        })
        .collect();
    assert!(!m.add(1, &s.enqueue(W(MAX_MATES, held.clone()))));
    assert!(m.len() <= MAX_MATES);
    // Room again once some leave, found after a bounded number of tries
    // (a full list is not pruned at every try).
    assert!(tickets[0].cancel().is_some());
    let tries = (0..2 * MAX_MATES)
        .position(|_| m.add(1, &s.enqueue(W(MAX_MATES + 1, held.clone()))))
        .expect("room found");
    assert!(tries > 0, "not pruned at every try");
    assert!(m.len() <= MAX_MATES);
    assert_eq!(m.take(1).len(), MAX_MATES);
}
