//! Refusals as a waiter joins its flow, and the bounds on the work and
//! memory of cancels and sweeps (counted in `FairQueue::visits`, not timed).

use super::*;

fn visits(s: &Slots<Rec>) -> u64 {
    s.fair.as_ref().expect("fair").lock().visits
}

#[test]
fn a_flow_at_its_share_is_refused_as_it_joins_its_queue_in_reject_mode() {
    let s: Arc<Slots<Rec>> = Slots::fair(4, cfg(Some(1), true, true));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(1));
    // As after a rate wait: the waiter comes straight to the queue.
    let r = s.try_enqueue_flow(1, rec(0, 1, &log, &held));
    assert!(matches!(r, Err(FlowRefused::Over(w)) if w.id == 0));
    assert_eq!(s.fair_stats().flow_rejected, 1);
    assert_eq!((s.waiting(), s.fair_stats().flows), (0, 1));
    // Another flow queues (strict: a free slot it may have is taken at once).
    let t = s
        .try_enqueue_flow(2, rec(1, 2, &log, &held))
        .ok()
        .expect("queued");
    assert!(!t.is_waiting());
    assert_eq!(*log.lock(), [(2, 1)]);
    drop(p);
}

#[test]
fn a_flow_waits_in_at_most_its_part_of_the_queue_places() {
    let s: Arc<Slots<Rec>> = Slots::fair(1, cfg(None, false, false));
    s.set_flow_queue(4);
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(9));
    // Flows 9 and 1 active: flow 1's part is ceil(4 × 1 / 2) = 2.
    let mut t = Vec::new();
    for i in 0..2 {
        t.push(
            s.try_enqueue_flow(1, rec(i, 1, &log, &held))
                .ok()
                .expect("within its part"),
        );
    }
    let r = s.try_enqueue_flow(1, rec(2, 1, &log, &held));
    assert!(matches!(r, Err(FlowRefused::Full(w)) if w.id == 2));
    assert_eq!(s.fair_stats().flow_rejected, 0, "not a share refusal");
    // Another flow still finds places: its part is ceil(4 / 3) = 2.
    for i in 0..2 {
        t.push(
            s.try_enqueue_flow(2, rec(10 + i, 2, &log, &held))
                .ok()
                .expect("its own part"),
        );
    }
    assert!(s.try_enqueue_flow(2, rec(12, 2, &log, &held)).is_err());
    assert_eq!(s.waiting(), 4);
    // Uncapped again: the unchecked path and `u32::MAX` queue more.
    s.set_flow_queue(u32::MAX);
    t.push(
        s.try_enqueue_flow(1, rec(3, 1, &log, &held))
            .ok()
            .expect("uncapped"),
    );
    drop(p);
    assert_eq!(*log.lock(), [(1, 0)]);
}

#[test]
fn cancelling_many_single_waiter_flows_costs_linear_work() {
    const FLOWS: u64 = 20_000;
    let s: Arc<Slots<Rec>> = Slots::fair(1, cfg(None, false, false));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(0));
    let tickets: Vec<_> = (1..=FLOWS)
        .map(|f| s.enqueue_flow(f, rec(f as usize, f, &log, &held)))
        .collect();
    let before = visits(&s);
    let gone = s.remove_waiting(|w| w.id % 2 == 0);
    for t in tickets.iter().step_by(2) {
        assert!(t.cancel().is_some());
    }
    assert_eq!(gone.len() as u64, FLOWS / 2);
    assert_eq!(s.waiting(), 0);
    // A ring scan per cancel would be ~FLOWS² / 2 visits.
    let work = visits(&s) - before;
    assert!(work <= 8 * FLOWS, "{work} visits for {FLOWS} cancels");
    // Everything is left idle and bounded, and slots still hand on.
    let _t = s.enqueue_flow(7, rec(0, 7, &log, &held));
    drop(p);
    assert_eq!(*log.lock(), [(7, 0)]);
    let q = s.fair.as_ref().unwrap().lock();
    assert!(
        q.flows.len() <= 2 * q.active_flows as usize + IDLE_KEPT,
        "{}",
        q.flows.len()
    );
    assert!(
        q.ring.capacity() <= 4 * 8,
        "ring capacity {}",
        q.ring.capacity()
    );
}

#[test]
fn a_sweep_keeps_flows_left_in_the_ring() {
    let s: Arc<Slots<Rec>> = Slots::fair(1, cfg(None, false, false));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(1));
    // Flow 2's only waiter leaves: flow 2 stays in the ring, dead.
    let t = s.enqueue_flow(2, rec(0, 2, &log, &held));
    assert!(t.cancel().is_some());
    // Many idle flows (refused a slot) make the next settle sweep.
    for f in 100..300 {
        assert!(matches!(s.try_acquire_flow(f), FlowTry::Wait));
    }
    let _t3 = s.enqueue_flow(3, rec(1, 3, &log, &held));
    let t4 = s.enqueue_flow(4, rec(2, 4, &log, &held));
    assert!(t4.cancel().is_some());
    assert!(s.fair.as_ref().unwrap().lock().flows.len() < 100, "swept");
    // The hand-off meets flow 2 first in the ring: it must still exist.
    drop(p);
    assert_eq!(*log.lock(), [(3, 1)]);
}

#[test]
fn the_flow_map_shrinks_after_a_burst() {
    const FLOWS: u64 = 20_000;
    let s: Arc<Slots<Rec>> = Slots::fair(FLOWS as u32, cfg(None, false, false));
    let permits: Vec<_> = (0..FLOWS).map(|f| go(s.try_acquire_flow(f))).collect();
    let big = s.fair.as_ref().unwrap().lock().flows.capacity();
    assert!(big >= FLOWS as usize);
    drop(permits);
    assert_eq!(s.fair_stats().flows, 0);
    let q = s.fair.as_ref().unwrap().lock();
    assert!(
        q.flows.capacity() <= 4 * q.flows.len().max(8),
        "capacity {} for {} flows",
        q.flows.capacity(),
        q.flows.len()
    );
    // The sweeps of the burst's end: geometric, not one capacity scan each.
    assert!(q.visits <= 8 * FLOWS, "{} visits", q.visits);
}

#[test]
fn a_limit_lowered_while_a_decision_waits_for_the_lock_is_obeyed() {
    let s: Arc<Slots<Rec>> = Slots::fair(2, cfg(None, false, false));
    let p = go(s.try_acquire_flow(1));
    let guard = s.fair.as_ref().unwrap().lock();
    let s2 = s.clone();
    let racer = std::thread::spawn(move || s2.try_acquire_flow(2).permit().is_some());
    // Lets the racer block on the lock (before the fix it had read limit 2).
    std::thread::sleep(std::time::Duration::from_millis(100));
    // What `set_limit` does before it takes the lock.
    s.limit.store(1, std::sync::atomic::Ordering::SeqCst);
    drop(guard);
    let got = racer.join().expect("no panic");
    assert!(!got, "a slot above the lowered limit");
    assert_eq!(s.active(), 1);
    drop(p);
}
