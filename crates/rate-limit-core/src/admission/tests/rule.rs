//! A rule's limiter (one bucket and one set of slots for every request):
//! slots, queue, maxage, rate waits, and keys or flows counted against the rule.

use super::*;

#[test]
fn concurrency_goes_waits_then_rejects() {
    let (l, _) = limiter(lim(Some(1), None, 1, 0));
    let Admission::Go(Some(p)) = l.admit_rule() else {
        panic!("first request must get the slot")
    };
    let Admission::Wait(wait) = l.admit_rule() else {
        panic!("second must wait")
    };
    assert_eq!(wait.rate_delay, 0);
    assert!(wait.rate.is_none());
    assert!(
        matches!(l.admit_rule(), Admission::Reject(Refused::QueueFull)),
        "queue of 1 is full"
    );
    assert_eq!(l.queued(), 1);
    drop(wait);
    assert_eq!(l.queued(), 0, "a dropped wait gives its place back");
    drop(p);
    assert_eq!(l.slots().map(|s| s.active()), Some(0));
}

#[test]
fn queued_waiter_gets_the_freed_slot() {
    let held = Held::default();
    let (l, _) = limiter(lim(Some(1), None, 5, 0));
    let Admission::Go(Some(p)) = l.admit_rule() else {
        panic!()
    };
    let Admission::Wait(wait) = l.admit_rule() else {
        panic!()
    };
    let SlotWait::Queued { ticket, expires_in } = l.wait_for_slot(wait.since, w(7, &held), None)
    else {
        panic!("must queue")
    };
    assert_eq!(expires_in, None);
    assert!(ticket.is_waiting());
    drop(p);
    assert!(!ticket.is_waiting());
    assert_eq!(held.lock().iter().map(|h| h.0).collect::<Vec<_>>(), vec![7]);
}

#[test]
fn maxage_expires_and_bounds_the_rate_wait() {
    let held = Held::default();
    let (l, clock) = limiter(lim(Some(1), None, 5, 100));
    let Admission::Go(Some(_p)) = l.admit_rule() else {
        panic!()
    };
    let Admission::Wait(wait) = l.admit_rule() else {
        panic!()
    };
    clock.advance(Duration::from_millis(40));
    let SlotWait::Queued { expires_in, ticket } = l.wait_for_slot(wait.since, w(1, &held), None)
    else {
        panic!()
    };
    assert_eq!(expires_in, Some(60 * NANOS_PER_MS));
    assert!(ticket.cancel().is_some());
    clock.advance(Duration::from_millis(60));
    assert!(matches!(
        l.wait_for_slot(wait.since, w(2, &held), None),
        SlotWait::Expired(_)
    ));

    // A rate wait longer than maxage is refused at once, taking nothing.
    let (l, _) = limiter(lim(None, Some((1.0, 1)), 5, 500));
    assert!(matches!(l.admit_rule(), Admission::Go(None)));
    assert!(matches!(l.admit_rule(), Admission::Reject(Refused::Rate)));
    assert_eq!(l.queued(), 0);
}

#[test]
fn rate_waits_reserve_a_token_that_unserved_requests_give_back() {
    let (l, clock) = limiter(lim(None, Some((10.0, 2)), 10, 0));
    assert!(matches!(l.admit_rule(), Admission::Go(None)));
    assert!(matches!(l.admit_rule(), Admission::Go(None)));
    let Admission::Wait(first) = l.admit_rule() else {
        panic!("over the burst: wait")
    };
    assert_eq!(first.rate_delay, 100 * NANOS_PER_MS);
    let Admission::Wait(second) = l.admit_rule() else {
        panic!()
    };
    assert_eq!(second.rate_delay, 200 * NANOS_PER_MS);
    // The first is not served (client left): its token comes back, so the
    // next newcomer waits no longer than the second already does.
    drop(first);
    let Admission::Wait(third) = l.admit_rule() else {
        panic!()
    };
    assert_eq!(third.rate_delay, 200 * NANOS_PER_MS);
    // Served waits keep their tokens.
    spend(second.rate);
    spend(third.rate);
    clock.advance(Duration::from_millis(200));
    let (_, quota) = l.remaining(None);
    assert_eq!(quota.map(|q| q.remaining), Some(0));
}

#[test]
fn rejected_for_a_slot_after_taking_a_rate_token_gives_it_back() {
    let (l, _) = limiter(lim(Some(1), Some((1.0, 2)), 0, 0));
    let Admission::Go(Some(_p)) = l.admit_rule() else {
        panic!()
    };
    assert_eq!(l.remaining(None).1.map(|q| q.remaining), Some(1));
    // Rate allows it, the slot does not and there is no queue: refused, and
    // the rate token it took comes back.
    assert!(matches!(
        l.admit_rule(),
        Admission::Reject(Refused::QueueFull)
    ));
    assert_eq!(l.remaining(None).1.map(|q| q.remaining), Some(1));
}

#[test]
fn departed_waiters_leave_the_queue_up_to_the_cap() {
    let held = Held::default();
    let (l, _) = limiter(lim(Some(1), None, 10, 0));
    let Admission::Go(Some(_p)) = l.admit_rule() else {
        panic!()
    };
    let mut tickets = Vec::new();
    for id in 0..6 {
        let Admission::Wait(wait) = l.admit_rule() else {
            panic!()
        };
        if let SlotWait::Queued { ticket, .. } = l.wait_for_slot(wait.since, w(id, &held), None) {
            tickets.push(ticket);
        }
    }
    let (gone, left) = l.remove_departed(3, |w| w.id % 2 == 0);
    assert_eq!(left, 4);
    // Only the first three were looked at: ids 0 and 2 are gone, 4 was not checked.
    assert_eq!(gone.iter().map(|w| w.id).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(l.slots().map(|s| s.waiting()), Some(4));
}

/// One step of a random workload.
#[derive(Clone, Debug)]
enum Op {
    Arrive,
    /// Client of the n-th waiting request leaves.
    Leave(usize),
    /// The n-th holder finishes.
    Finish(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Arrive),
        1 => (0usize..8).prop_map(Op::Leave),
        3 => (0usize..8).prop_map(Op::Finish),
        2 => (1u64..400).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Whatever arrives, leaves and finishes, and whenever: slots held never
    /// exceed the limit, waits never exceed the queue, served requests never
    /// exceed what the bucket allows (burst + rate·t), each waiter is admitted
    /// at most once and in FIFO order.
    #[test]
    fn invariants_hold_under_random_workloads(
        limit in 1u32..4,
        queue in 0u32..5,
        rate in prop::option::of((1u32..50, 1u32..5)),
        maxage_ms in prop::option::of(50u64..500),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let limits = Limits {
            limit: Some(limit),
            rate: rate.map(|(r, b)| (f64::from(r), b)),
            queue,
            maxage: maxage_ms.map(|m| m * NANOS_PER_MS),
            block: None,
            auto: None,
        };
        let (l, clock) = limiter(limits);
        let start = clock.now();
        let held = Held::default();
        let mut holders: Vec<Permit<W>> = Vec::new();
        // Waits for the rate: (ready at, wait); waits for a slot: tickets.
        let mut rate_waits: Vec<(Nanos, Wait<W, Arc<ManualClock>>)> = Vec::new();
        let mut tickets = Vec::new();
        let mut served = 0u64;
        let mut next_id = 0usize;
        let mut admitted_order = Vec::new();
        for op in ops {
            match op {
                Op::Arrive => match l.admit_rule() {
                    Admission::Go(p) => {
                        served += 1;
                        holders.extend(p);
                    }
                    Admission::Wait(wait) => {
                        prop_assert!(limits.maxage.is_none_or(|m| wait.rate_delay <= m));
                        rate_waits.push((clock.now() + wait.rate_delay, wait));
                    }
                    Admission::Reject(_) => {}
                },
                Op::Leave(n) => {
                    if !rate_waits.is_empty() {
                        let i = n % rate_waits.len();
                        drop(rate_waits.remove(i));
                    } else if !tickets.is_empty() {
                        let (t, place, rate): (Ticket<W>, _, Option<RateToken<W, _>>) =
                            tickets.remove(n % tickets.len());
                        drop(t.cancel());
                        drop((place, rate));
                    }
                }
                Op::Finish(n) => {
                    if !holders.is_empty() {
                        drop(holders.remove(n % holders.len()));
                    }
                    // Released outside the lock: the hand-off admits a waiter,
                    // whose admit takes the lock.
                    let finished = {
                        let mut h = held.lock();
                        let i = n % h.len().max(1);
                        (!h.is_empty()).then(|| h.remove(i))
                    };
                    drop(finished);
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
            // Rate waits whose time came go for a slot.
            let now = clock.now();
            let (ready, rest): (Vec<_>, Vec<_>) =
                rate_waits.drain(..).partition(|(at, _)| *at <= now);
            rate_waits = rest;
            for (_, wait) in ready {
                let id = next_id;
                next_id += 1;
                match l.wait_for_slot(wait.since, w(id, &held), None) {
                    SlotWait::Go(_) => unreachable!("the limiter has slots"),
                    SlotWait::Expired(_) => {}
                    SlotWait::Refused(_) => unreachable!("not fair"),
                    SlotWait::Queued { ticket, .. } => {
                        tickets.push((ticket, wait.place, wait.rate));
                    }
                }
            }
            // Admitted tickets are served: their rate tokens stay spent.
            let (done, waiting): (Vec<_>, Vec<_>) =
                tickets.drain(..).partition(|(t, _, _)| !t.is_waiting());
            tickets = waiting;
            for (_, _, rate) in done {
                served += 1;
                spend(rate);
            }
            for (id, _) in held.lock().iter() {
                if !admitted_order.contains(id) {
                    admitted_order.push(*id);
                }
            }
            let slots = l.slots().map(|s| (s.active(), s.waiting()));
            let (active, waiting) = slots.unwrap_or_default();
            prop_assert!(active <= limit);
            prop_assert!(l.queued() <= queue);
            prop_assert!(waiting <= queue);
            if let Some((r, b)) = rate {
                let elapsed = clock.now() - start;
                let allowed = u64::from(b) + u64::from(r) * elapsed / NANOS_PER_SEC + 1;
                prop_assert!(served <= allowed, "served {served} > {allowed}");
            }
        }
        // FIFO: slot waiters were admitted in the order they queued.
        let mut sorted = admitted_order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(admitted_order, sorted);
    }
}

/// A key or a flow given to a plain rule limiter never escapes the
/// rule's limits: the rule's one bucket and slots count every request.
#[test]
fn a_rule_limiter_counts_keys_and_flows_against_the_rule() {
    let limits = Limits {
        limit: Some(2),
        rate: Some((1.0, 3)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let (l, _clock) = limiter(limits);
    assert_eq!(l.flow_key(b"a"), 0, "not fair: no flows");
    let Admission::Go(Some(a)) = l.admit_key(1) else {
        panic!("the first takes a slot")
    };
    let Admission::Go(Some(_b)) = l.admit_flow(7) else {
        panic!("the second takes the other")
    };
    assert!(matches!(
        l.admit_key(2),
        Admission::Reject(Refused::QueueFull)
    ));
    drop(a);
    assert!(matches!(
        l.admit_key_tagged(3, b"t"),
        Admission::Go(Some(_))
    ));
    // Three tokens taken (the refusal gave its own back): the bucket is empty.
    assert!(matches!(l.admit_rule(), Admission::Reject(Refused::Rate)));
}
