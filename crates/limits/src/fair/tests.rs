use super::queue::IDLE_KEPT;
use super::*;
use crate::slots::Slots;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

type Log = Arc<Mutex<Vec<(u64, usize)>>>;
type Held = Arc<Mutex<Vec<Permit<Rec>>>>;

/// Records admissions (flow, id); keeps permits in a shared list so tests
/// release them; runs the scheduler checks at each admission.
struct Rec {
    id: usize,
    flow: u64,
    log: Log,
    held: Held,
    decline: bool,
    check: Option<Arc<Mutex<Checker>>>,
}

impl Waiter for Rec {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.decline {
            return Err(permit);
        }
        if let Some(c) = &self.check {
            c.lock().on_grant(permit.slots(), self.flow);
        }
        self.log.lock().push((self.flow, self.id));
        self.held.lock().push(permit);
        Ok(())
    }
}

/// Checks made at every hand-off, with the scheduler's state as the grant
/// left it (the next grant waits for this `admit` to return).
#[derive(Default)]
struct Checker {
    flows: Vec<u64>,
    /// Grants to other flows while this one waited, under its share.
    skipped: HashMap<u64, usize>,
    most_skipped: usize,
    violations: Vec<String>,
}

impl Checker {
    fn on_grant(&mut self, s: &Slots<Rec>, to: u64) {
        let me = s.flow_state(to).expect("the flow holds the slot");
        let borrowed = me.held > me.share;
        for &f in &self.flows {
            if f == to {
                self.skipped.insert(f, 0);
                continue;
            }
            let entitled_waiter = s
                .flow_state(f)
                .is_some_and(|st| st.waiting > 0 && st.held < st.share);
            if entitled_waiter && borrowed {
                self.violations.push(format!(
                    "flow {to} borrowed while flow {f} waited under its share"
                ));
            }
            let n = self.skipped.entry(f).or_default();
            *n = if entitled_waiter { *n + 1 } else { 0 };
            self.most_skipped = self.most_skipped.max(*n);
        }
    }
}

fn rec(id: usize, flow: u64, log: &Log, held: &Held) -> Rec {
    Rec {
        id,
        flow,
        log: log.clone(),
        held: held.clone(),
        decline: false,
        check: None,
    }
}

fn cfg(flow_slots: Option<u32>, strict: bool, reject_over: bool) -> FairConfig {
    FairConfig {
        flow_slots,
        strict,
        reject_over,
        weights: HashMap::new(),
    }
}

fn go(t: FlowTry<Rec>) -> Permit<Rec> {
    match t {
        FlowTry::Go(p) => p,
        FlowTry::Wait => panic!("expected a slot, got Wait"),
        FlowTry::Over => panic!("expected a slot, got Over"),
    }
}

/// Releases the oldest held permit outside the list's lock (the hand-off
/// pushes into it).
fn release_first(held: &Held) {
    let p = held.lock().remove(0);
    drop(p);
}

mod bounds;
mod stress;

#[test]
fn a_freed_slot_goes_to_the_next_flow_not_the_oldest_waiter() {
    let s: Arc<Slots<Rec>> = Slots::fair(2, cfg(None, false, false));
    let (log, held) = (Log::default(), Held::default());
    let a1 = go(s.try_acquire_flow(1));
    let a2 = go(s.try_acquire_flow(1));
    let _t: Vec<_> = (0..5)
        .map(|i| s.enqueue_flow(1, rec(i, 1, &log, &held)))
        .collect();
    let _b = s.enqueue_flow(2, rec(100, 2, &log, &held));
    let _c = s.enqueue_flow(3, rec(200, 3, &log, &held));
    drop(a1);
    drop(a2);
    // Flow 1 holds 2 of a fair share of ceil(2/3) = 1: flows 2 and 3 first.
    assert_eq!(*log.lock(), [(2, 100), (3, 200)]);
    release_first(&held);
    release_first(&held);
    // Then flow 1 in its own order.
    assert_eq!(log.lock()[2..], [(1, 0), (1, 1)]);
    assert_eq!(s.fair_stats().flows, 1);
}

#[test]
fn within_a_flow_order_never_changes_and_newcomers_do_not_overtake() {
    let s: Arc<Slots<Rec>> = Slots::fair(1, cfg(None, false, false));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(7));
    let _t: Vec<_> = (0..4)
        .map(|i| s.enqueue_flow(7, rec(i, 7, &log, &held)))
        .collect();
    drop(p);
    assert!(matches!(s.try_acquire_flow(7), FlowTry::Wait));
    for _ in 0..4 {
        release_first(&held);
    }
    let ids: Vec<usize> = log.lock().iter().map(|e| e.1).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert_eq!((s.active(), s.waiting(), s.fair_stats().flows), (0, 0, 0));
}

#[test]
fn borrowing_uses_idle_slots_and_is_repaid_first() {
    let s: Arc<Slots<Rec>> = Slots::fair(4, cfg(Some(2), false, false));
    let (log, held) = (Log::default(), Held::default());
    let mine: Vec<_> = (0..4).map(|_| go(s.try_acquire_flow(1))).collect();
    assert_eq!(s.fair_stats().borrowed, 2, "two slots above the share of 2");
    assert!(matches!(s.try_acquire_flow(1), FlowTry::Wait));
    let _a = s.enqueue_flow(1, rec(0, 1, &log, &held));
    let _b = s.enqueue_flow(2, rec(1, 2, &log, &held));
    drop(mine);
    // Flow 2 (under its share) first; then flow 1 gets back to its share,
    // and borrows again only once nobody under a share waits.
    assert_eq!(*log.lock(), [(2, 1), (1, 0)]);
    assert_eq!(s.active(), 2);
}

#[test]
fn strict_never_exceeds_the_share_even_when_idle() {
    let s: Arc<Slots<Rec>> = Slots::fair(10, cfg(Some(3), true, false));
    let (log, held) = (Log::default(), Held::default());
    let mine: Vec<_> = (0..3).map(|_| go(s.try_acquire_flow(1))).collect();
    assert!(matches!(s.try_acquire_flow(1), FlowTry::Wait));
    let _t = s.enqueue_flow(1, rec(0, 1, &log, &held));
    assert!(log.lock().is_empty(), "7 idle slots, but strict");
    // Another flow takes an idle slot directly.
    let other = go(s.try_acquire_flow(2));
    drop(mine);
    assert_eq!(*log.lock(), [(1, 0)]);
    assert_eq!(s.fair_stats().borrowed, 0);
    drop(other);
}

#[test]
fn hard_limit_rejects_a_flow_at_its_share() {
    let s: Arc<Slots<Rec>> = Slots::fair(4, cfg(Some(1), true, true));
    let p = go(s.try_acquire_flow(1));
    assert!(matches!(s.try_acquire_flow(1), FlowTry::Over));
    assert!(matches!(s.try_acquire_flow(2), FlowTry::Go(_)));
    assert_eq!(s.fair_stats().flow_rejected, 1);
    drop(p);
    // Borrowing with a hard limit: a flow at its share borrows an idle slot,
    // and is refused only when it would have to wait.
    let s: Arc<Slots<Rec>> = Slots::fair(2, cfg(Some(1), false, true));
    let a = go(s.try_acquire_flow(1));
    let b = go(s.try_acquire_flow(1));
    assert!(matches!(s.try_acquire_flow(1), FlowTry::Over));
    assert!(matches!(s.try_acquire_flow(2), FlowTry::Wait));
    assert_eq!(
        s.fair_stats(),
        FairStats {
            flows: 1,
            borrowed: 1,
            flow_rejected: 1
        }
    );
    drop((a, b));
}

#[test]
fn default_share_divides_the_limit_between_active_flows() {
    let s: Arc<Slots<Rec>> = Slots::fair(10, cfg(None, true, false));
    let a: Vec<_> = (0..10).map(|_| go(s.try_acquire_flow(1))).collect();
    assert_eq!(
        s.flow_state(1).map(|f| f.share),
        Some(10),
        "alone: all of it"
    );
    let (log, held) = (Log::default(), Held::default());
    let _t: Vec<_> = (0..6)
        .map(|i| s.enqueue_flow(2, rec(i, 2, &log, &held)))
        .collect();
    assert_eq!(s.flow_state(2).map(|f| f.share), Some(5));
    let mut a = a.into_iter();
    for p in a.by_ref().take(6) {
        drop(p);
    }
    // Strict: flow 2 gets its 5, and a sixth slot stays idle while flow 1 holds 4.
    assert_eq!((log.lock().len(), s.active()), (5, 9));
    drop(a);
    // Flow 1 left: flow 2's share is all 10.
    assert_eq!((log.lock().len(), s.active()), (6, 6));
}

#[test]
fn weights_give_slots_and_turns() {
    let mut c = cfg(Some(1), true, false);
    c.weights.insert(
        5,
        FlowWeight {
            slots: Some(3),
            weight: 2,
        },
    );
    let s: Arc<Slots<Rec>> = Slots::fair(4, c);
    let (log, held) = (Log::default(), Held::default());
    let all: Vec<_> = (0..4)
        .map(|_| go(s.try_acquire_flow(9 + s.active() as u64)))
        .collect();
    for i in 0..3 {
        let _ = s.enqueue_flow(5, rec(i, 5, &log, &held));
        let _ = s.enqueue_flow(6, rec(10 + i, 6, &log, &held));
    }
    drop(all);
    // Weight 2: two turns in a row; 3 slots for flow 5, 1 for flow 6.
    assert_eq!(*log.lock(), [(5, 0), (5, 1), (6, 10), (5, 2)]);
    assert_eq!(s.flow_state(5).map(|f| (f.held, f.share)), Some((3, 3)));
}

#[test]
fn cancels_declines_and_departures_keep_counts_and_forget_idle_flows() {
    let s: Arc<Slots<Rec>> = Slots::fair(1, cfg(None, false, false));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(1));
    let t0 = s.enqueue_flow(2, rec(0, 2, &log, &held));
    let _t1 = s.enqueue_flow(
        3,
        Rec {
            decline: true,
            ..rec(1, 3, &log, &held)
        },
    );
    let _t2 = s.enqueue_flow(4, rec(2, 4, &log, &held));
    let _t3 = s.enqueue_flow(5, rec(3, 5, &log, &held));
    assert_eq!(t0.cancel().map(|w| w.id), Some(0));
    let gone: Vec<usize> = s
        .remove_waiting(|w| w.id == 3)
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(gone, [3]);
    assert_eq!((s.waiting(), s.fair_stats().flows), (2, 3));
    drop(p);
    // Flow 3 declined: the slot went on to flow 4.
    assert_eq!(*log.lock(), [(4, 2)]);
    release_first(&held);
    assert_eq!((s.active(), s.waiting(), s.fair_stats().flows), (0, 0, 0));
    for i in 0..10_000 {
        let p = go(s.try_acquire_flow(1));
        let t = s.enqueue_flow(i, rec(0, i, &log, &held));
        assert!(t.cancel().is_some());
        drop(p);
    }
    assert_eq!(s.fair_stats().flows, 0);
    let kept = s.fair.as_ref().unwrap().lock().flows.len();
    assert!(
        kept <= IDLE_KEPT + 1,
        "memory follows the flows in use: {kept}"
    );
}

#[test]
fn a_larger_share_set_live_admits_at_once() {
    let s: Arc<Slots<Rec>> = Slots::fair(4, cfg(Some(1), true, false));
    let (log, held) = (Log::default(), Held::default());
    let p = go(s.try_acquire_flow(1));
    let _t: Vec<_> = (0..3)
        .map(|i| s.enqueue_flow(1, rec(i, 1, &log, &held)))
        .collect();
    assert!(log.lock().is_empty());
    s.set_fair(cfg(Some(3), true, false));
    assert_eq!(log.lock().len(), 2);
    s.set_fair(cfg(None, false, false));
    assert_eq!(log.lock().len(), 3);
    drop(p);
}

#[test]
fn a_panicking_admit_does_not_stall_the_queue() {
    struct Boom(bool, Arc<Mutex<Vec<Permit<Boom>>>>);
    impl Waiter for Boom {
        fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
            if self.0 {
                panic!("admit failed");
            }
            self.1.lock().push(permit);
            Ok(())
        }
    }
    let s: Arc<Slots<Boom>> = Slots::fair(1, cfg(None, false, false));
    let held = Arc::new(Mutex::new(Vec::new()));
    let p = s.try_acquire_flow(1).permit().unwrap();
    let _a = s.enqueue_flow(2, Boom(true, held.clone()));
    let _b = s.enqueue_flow(3, Boom(false, held.clone()));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p)));
    assert!(r.is_err());
    assert_eq!(held.lock().len(), 1);
    assert_eq!((s.active(), s.waiting()), (1, 0));
}

mod model {
    use super::*;
    use proptest::prelude::*;

    const FLOWS: u64 = 4;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire(u64),
        Enqueue(u64),
        Cancel(usize),
        Release(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..FLOWS).prop_map(Op::Acquire),
            3 => (0..FLOWS).prop_map(Op::Enqueue),
            1 => any::<usize>().prop_map(Op::Cancel),
            3 => any::<usize>().prop_map(Op::Release),
        ]
    }

    proptest! {
        /// Whatever happens: held slots never exceed the limit (strict: nor a
        /// static share); each flow is served in its own order; a flow under
        /// its share waits at most one turn (its weight) of every other flow; nobody
        /// borrows while a flow under its share waits; and once the holders
        /// leave, every waiter still queued is served (nobody starves).
        #[test]
        fn scheduler_invariants(
            limit in 1u32..6,
            flow_slots in proptest::option::of(1u32..4),
            strict: bool,
            weights in proptest::collection::vec(1u32..4, FLOWS as usize),
            ops in proptest::collection::vec(op(), 1..150),
        ) {
            let mut c = cfg(flow_slots, strict, false);
            for (f, &weight) in weights.iter().enumerate() {
                c.weights.insert(f as u64, FlowWeight { slots: None, weight });
            }
            let s: Arc<Slots<Rec>> = Slots::fair(limit, c);
            let (log, held) = (Log::default(), Held::default());
            let check = Arc::new(Mutex::new(Checker { flows: (0..FLOWS).collect(), ..Checker::default() }));
            let mut tickets = Vec::new();
            let mut next_id = 0;
            let waiter = |id: usize, flow: u64| Rec { check: Some(check.clone()), ..rec(id, flow, &log, &held) };
            for op in ops {
                match op {
                    Op::Acquire(f) => {
                        if let FlowTry::Go(p) = s.try_acquire_flow(f) {
                            held.lock().push(p);
                        }
                    }
                    Op::Enqueue(f) => {
                        if s.flow_state(f).is_none_or(|st| st.waiting == 0) {
                            // It joins the round at the back: a new turn.
                            check.lock().skipped.insert(f, 0);
                        }
                        tickets.push(s.enqueue_flow(f, waiter(next_id, f)));
                        next_id += 1;
                    }
                    Op::Cancel(i) if !tickets.is_empty() => {
                        let _ = tickets[i % tickets.len()].cancel();
                    }
                    Op::Release(i) if !held.lock().is_empty() => {
                        let p = { let mut h = held.lock(); let n = h.len(); h.remove(i % n) };
                        drop(p);
                    }
                    _ => {}
                }
                prop_assert!(s.active() <= limit);
                prop_assert_eq!(s.active() as usize, held.lock().len());
                if let (true, Some(n)) = (strict, flow_slots) {
                    for f in 0..FLOWS {
                        prop_assert!(s.flow_state(f).is_none_or(|st| st.held <= n));
                    }
                }
            }
            // Drain: release every holder; the waiters follow.
            for _ in 0..(next_id + limit as usize + 1) {
                if held.lock().is_empty() {
                    break;
                }
                release_first(&held);
            }
            prop_assert_eq!((s.active(), s.waiting(), s.fair_stats().flows), (0, 0, 0));
            let cancelled = tickets.iter().filter(|t| !t.is_waiting()).count();
            prop_assert_eq!(cancelled, tickets.len());
            let c = check.lock();
            prop_assert!(c.violations.is_empty(), "{:?}", c.violations);
            // Each other flow is served at most its weight in turns ahead.
            let bound = weights.iter().sum::<u32>() as usize;
            prop_assert!(c.most_skipped < bound, "skipped {} turns", c.most_skipped);
            // Per-flow FIFO: queued ids of one flow are admitted in order.
            for f in 0..FLOWS {
                let ids: Vec<usize> = log.lock().iter().filter(|e| e.0 == f).map(|e| e.1).collect();
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "flow {}: {:?}", f, ids);
            }
        }
    }
}
