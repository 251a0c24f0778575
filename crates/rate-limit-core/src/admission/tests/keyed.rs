//! A keyed limiter: each key's own bucket, slots and queue in a bounded table.

use super::*;

fn keyed(limits: Limits, keys: usize) -> (Arc<Limiter<W, Arc<ManualClock>>>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    (Limiter::keyed(limits, keys, clock.clone()), clock)
}

#[test]
fn each_key_has_its_own_bucket() {
    let (l, clock) = keyed(lim(None, Some((1.0, 2)), 0, 0), 100);
    let (a, b) = (Some(1), Some(2));
    assert!(matches!(l.admit_in_scope(a, &[]), Admission::Go(None)));
    assert!(matches!(l.admit_in_scope(a, &[]), Admission::Go(None)));
    assert!(
        matches!(l.admit_in_scope(a, &[]), Admission::Reject(Refused::Rate)),
        "a is over its rate"
    );
    assert!(
        matches!(l.admit_in_scope(b, &[]), Admission::Go(None)),
        "b is not"
    );
    assert!(
        matches!(l.admit_rule(), Admission::Reject(Refused::KeyMissing)),
        "no key: refused as key_missing"
    );
    clock.advance(Duration::from_secs(1));
    assert!(matches!(l.admit_in_scope(a, &[]), Admission::Go(None)));
    assert_eq!(l.remaining(a).1.map(|q| q.remaining), Some(0));
    assert_eq!(l.remaining(b).1.map(|q| q.remaining), Some(2));
    assert_eq!(l.remaining(Some(99)).1.map(|q| q.remaining), Some(2));
}

#[test]
fn each_key_has_its_own_slots_and_queue() {
    let held = Held::default();
    let (l, _) = keyed(lim(Some(1), None, 1, 0), 100);
    let Admission::Go(Some(pa)) = l.admit_key(1) else {
        panic!("a gets its slot")
    };
    let Admission::Go(Some(_pb)) = l.admit_key(2) else {
        panic!("b too")
    };
    let Admission::Wait(wait) = l.admit_key(1) else {
        panic!("a's second waits")
    };
    assert!(
        matches!(l.admit_key(1), Admission::Reject(Refused::QueueFull)),
        "a's queue of 1 is full"
    );
    let SlotWait::Queued { ticket, .. } = l.wait_for_slot(wait.since, w(1, &held), Some(1)) else {
        panic!()
    };
    assert!(ticket.is_waiting());
    drop(pa);
    assert!(!ticket.is_waiting(), "a's freed slot went to a's waiter");
    assert_eq!(held.lock().len(), 1);
    assert_eq!(l.remaining(Some(1)).0, Some(0));
}

#[test]
fn busy_keys_are_never_evicted_and_a_full_table_of_them_refuses() {
    let (l, _) = keyed(lim(Some(1), None, 0, 0), 2);
    let Admission::Go(Some(pa)) = l.admit_key(1) else {
        panic!()
    };
    let Admission::Go(Some(pb)) = l.admit_key(2) else {
        panic!()
    };
    // Both keys hold a slot: a third key has no room, and pressure does not
    // push out a busy key (which would reset its limit).
    for k in 3..50 {
        assert!(matches!(
            l.admit_key(k),
            Admission::Reject(Refused::KeyTableFull)
        ));
    }
    assert!(
        matches!(l.admit_key(1), Admission::Reject(Refused::QueueFull)),
        "a still holds its slot"
    );
    drop(pb);
    // b is idle now: a new key may take its place.
    let Admission::Go(Some(_pc)) = l.admit_key(3) else {
        panic!("an idle key gives way")
    };
    assert!(matches!(
        l.admit_key(1),
        Admission::Reject(Refused::QueueFull)
    ));
    drop(pa);
    assert!(l.keys().is_some_and(|t| t.len() <= 2));
}

#[test]
fn an_unserved_keyed_wait_gives_the_token_back_to_its_key() {
    let (l, _) = keyed(lim(None, Some((10.0, 1)), 5, 0), 10);
    assert!(matches!(l.admit_key(1), Admission::Go(None)));
    let Admission::Wait(w1) = l.admit_key(1) else {
        panic!()
    };
    assert_eq!(w1.rate_delay, 100 * NANOS_PER_MS);
    drop(w1);
    let Admission::Wait(w2) = l.admit_key(1) else {
        panic!()
    };
    assert_eq!(
        w2.rate_delay,
        100 * NANOS_PER_MS,
        "the dropped wait's token came back"
    );
}

proptest! {
    /// With room for every key, each key is limited exactly as a rule-wide
    /// limiter would be: served ≤ burst + rate·t (+1) per key, whatever the
    /// interleaving of keys.
    #[test]
    fn each_key_is_limited_alone(
        rate in 1u32..20,
        burst in 1u32..5,
        ops in prop::collection::vec((0u64..5, 0u64..300), 1..300),
    ) {
        let (l, clock) = keyed(lim(None, Some((f64::from(rate), burst)), 0, 0), 16);
        let start = clock.now();
        let mut served = [0u64; 5];
        for (key, ms) in ops {
            clock.advance(Duration::from_millis(ms));
            if let Admission::Go(_) = l.admit_key(key) {
                served[key as usize] += 1;
            }
            let elapsed = clock.now() - start;
            let allowed = u64::from(burst) + u64::from(rate) * elapsed / NANOS_PER_SEC + 1;
            prop_assert!(served[key as usize] <= allowed);
        }
    }
}

#[test]
fn a_key_costs_16_bytes_inline_and_nothing_more_without_queues() {
    assert_eq!(std::mem::size_of::<Keyed<W>>(), 16);
    // A rate-only key with no queue allocates nothing besides its entry.
    let (l, _) = keyed(lim(None, Some((1.0, 1)), 0, 0), 10);
    assert!(matches!(l.admit_key(1), Admission::Go(None)));
    assert!(matches!(l.admit_key(1), Admission::Reject(Refused::Rate)));
    let mut allocated = 0;
    if let Some(t) = l.keys() {
        t.for_each(|_, st| allocated += usize::from(st.queues.is_some()));
    }
    assert_eq!(allocated, 0);
}

#[test]
fn departed_keyed_waiters_are_found_in_their_keys_queues() {
    let held = Held::default();
    let (l, _) = keyed(lim(Some(1), None, 5, 0), 100);
    let mut permits = Vec::new();
    let mut tickets = Vec::new();
    for key in 0..3u64 {
        let Admission::Go(Some(p)) = l.admit_key(key) else {
            panic!()
        };
        permits.push(p);
        for id in 0..2 {
            let Admission::Wait(wait) = l.admit_key(key) else {
                panic!()
            };
            let w = w(10 * key as usize + id, &held);
            if let SlotWait::Queued { ticket, .. } = l.wait_for_slot(wait.since, w, Some(key)) {
                tickets.push((ticket, wait));
            }
        }
    }
    let (gone, left) = l.remove_departed(100, |w| w.id % 10 == 1);
    let mut ids: Vec<_> = gone.iter().map(|w| w.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 11, 21]);
    assert_eq!(left, 3);
    // Queues that emptied leave the list.
    drop(gone);
    drop(permits);
    let (gone, left) = l.remove_departed(100, |_| true);
    assert!(gone.is_empty());
    assert_eq!(left, 0);
    let Scope::Keyed(scope) = &l.scope else {
        panic!("keyed")
    };
    assert!(scope.waiting_queues.lock().is_empty());
}

/// A keyed limiter asked without a key (for the rule, or for a flow,
/// which is no client key) refuses, as `key_missing`, and takes nothing.
#[test]
fn a_keyed_limiter_refuses_a_request_without_a_key() {
    let limits = Limits {
        limit: Some(1),
        rate: Some((1.0, 1)),
        queue: 1,
        maxage: None,
        block: None,
        auto: None,
    };
    let (l, _clock) = keyed(limits, 10);
    assert!(matches!(
        l.admit_rule(),
        Admission::Reject(Refused::KeyMissing)
    ));
    assert!(matches!(
        l.admit_flow(5),
        Admission::Reject(Refused::KeyMissing)
    ));
    assert_eq!(l.keys().map(|t| t.len()), Some(0), "nothing taken");
    assert!(matches!(l.admit_key(5), Admission::Go(Some(_))));
}
