use std::sync::Arc;
use std::time::Duration;

use limits::{ManualClock, Nanos, Permit, Ticket, Waiter, NANOS_PER_MS, NANOS_PER_SEC};
use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;

/// A waiter that keeps the permit it is given in a shared list (or declines).
struct W {
    id: usize,
    held: Held,
    decline: bool,
}

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.decline {
            return Err(permit);
        }
        self.held.lock().push((self.id, permit));
        Ok(())
    }
}

type Held = Arc<Mutex<Vec<(usize, Permit<W>)>>>;

/// A served wait keeps its rate token.
fn spend<C: limits::Clock>(token: Option<RateToken<W, C>>) {
    if let Some(t) = token {
        t.spend();
    }
}

fn limiter(limits: Limits) -> (Arc<Limiter<W, Arc<ManualClock>>>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    (Limiter::new(limits, clock.clone()), clock)
}

fn lim(limit: Option<u32>, rate: Option<(f64, u32)>, queue: u32, maxage_ms: u64) -> Limits {
    Limits {
        limit,
        rate,
        queue,
        maxage: (maxage_ms > 0).then_some(maxage_ms * NANOS_PER_MS),
    }
}

fn w(id: usize, held: &Held) -> W {
    W {
        id,
        held: held.clone(),
        decline: false,
    }
}

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

/// Queues `n` waiters (ids from `first`) on the limiter's slots (of `key`).
fn queue_waiters(
    l: &Arc<Limiter<W, Arc<ManualClock>>>,
    key: Option<u64>,
    first: usize,
    n: usize,
    held: &Held,
) -> Vec<Ticket<W>> {
    (first..first + n)
        .map(|i| {
            let Admission::Wait(wait) = l.admit_in_scope(key, &[]) else {
                panic!("request {i} must wait")
            };
            let SlotWait::Queued { ticket, .. } = l.wait_for_slot(wait.since, w(i, held), key)
            else {
                panic!("request {i} must queue")
            };
            std::mem::forget(wait.place);
            ticket
        })
        .collect()
}

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

/// A key or a flow given to a plain rule limiter never escapes the
/// rule's limits: the rule's one bucket and slots count every request.
#[test]
fn a_rule_limiter_counts_keys_and_flows_against_the_rule() {
    let limits = Limits {
        limit: Some(2),
        rate: Some((1.0, 3)),
        queue: 0,
        maxage: None,
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

/// A keyed limiter asked without a key (for the rule, or for a flow,
/// which is no client key) refuses, as `key_missing`, and takes nothing.
#[test]
fn a_keyed_limiter_refuses_a_request_without_a_key() {
    let limits = Limits {
        limit: Some(1),
        rate: Some((1.0, 1)),
        queue: 1,
        maxage: None,
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
