use super::*;
use proptest::prelude::*;
use std::sync::{Arc, Barrier};

#[test]
fn admits_up_to_max() {
    let g = Gate::new(2);
    assert!(g.try_enter() && g.try_enter());
    assert!(!g.try_enter());
    g.leave();
    assert!(g.try_enter());
    assert_eq!(g.in_flight(), 2);
    let z = Gate::new(0);
    assert!(!z.try_enter());
}

#[test]
fn max_changes_live() {
    let g = Gate::new(1);
    assert!(g.try_enter());
    assert!(!g.try_enter());
    g.set_max(3);
    assert_eq!(g.max(), 3);
    assert!(g.try_enter() && g.try_enter(), "raising admits at once");
    assert!(!g.try_enter());
    g.set_max(1);
    assert_eq!(g.in_flight(), 3, "lowering preempts nobody");
    g.leave();
    assert!(!g.try_enter(), "2 in flight, max 1");
    g.leave();
    g.leave();
    assert!(g.try_enter());
    assert!(!g.try_enter());
}

#[test]
fn leave_never_underflows() {
    let g = Gate::new(1);
    g.leave();
    assert_eq!(g.in_flight(), 0);
    assert!(g.try_enter());
}

#[test]
fn tickets_enter_once_and_leave_once() {
    let g = Arc::new(Gate::new(1));
    let t = Ticket::new(g.clone());
    assert_eq!(t.enter(), Entry::Entered);
    assert_eq!(t.enter(), Entry::AlreadyIn);
    assert_eq!(g.in_flight(), 1);
    let other = Ticket::new(g.clone());
    assert_eq!(other.enter(), Entry::Refused);
    assert!(!other.holds());
    drop(other);
    assert_eq!(g.in_flight(), 1, "a refused ticket must not leave");
    assert!(t.leave());
    assert!(!t.leave());
    drop(t);
    assert_eq!(g.in_flight(), 0);
    let t = Ticket::new(g.clone());
    assert_eq!(t.enter(), Entry::Entered);
    drop(t);
    assert_eq!(g.in_flight(), 0, "drop leaves");
}

#[test]
fn intervals_reset() {
    let g = Gate::new(5);
    for _ in 0..3 {
        assert!(g.try_enter());
    }
    g.leave();
    g.note_unavailable();
    g.note_stale();
    g.note_stale();
    assert_eq!(
        g.take_interval(),
        Interval {
            high_water: 3,
            unavailable: 1,
            stale: 2
        }
    );
    // The mark restarts from the 2 still in flight.
    assert_eq!(
        g.take_interval(),
        Interval {
            high_water: 2,
            unavailable: 0,
            stale: 0
        }
    );
    g.leave();
    g.leave();
    assert_eq!(g.take_interval().high_water, 2);
    assert_eq!(g.take_interval().high_water, 0);
}

#[test]
fn concurrent_entries_never_exceed_max() {
    const THREADS: usize = 8;
    let g = Arc::new(Gate::new(3));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (g, barrier) = (g.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut admitted = 0u64;
                for _ in 0..20_000 {
                    let t = Ticket::new(&*g);
                    if t.enter() == Entry::Entered {
                        admitted += 1;
                        assert!(g.in_flight() <= 3);
                    } else {
                        g.note_unavailable();
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    assert_eq!(g.in_flight(), 0);
    let iv = g.take_interval();
    assert!(iv.high_water >= 1 && iv.high_water <= 3, "{iv:?}");
    assert_eq!(admitted + iv.unavailable, (THREADS * 20_000) as u64);
}

#[derive(Clone, Debug)]
enum Op {
    Enter(usize),
    Leave(usize),
    Drop(usize),
    Take,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6usize).prop_map(Op::Enter),
        (0..6usize).prop_map(Op::Leave),
        (0..6usize).prop_map(Op::Drop),
        Just(Op::Take),
    ]
}

proptest! {
    /// Against a model: in-flight = tickets held, never above max; the
    /// high-water mark is the model's maximum since the last take.
    #[test]
    fn matches_a_model(max in 0u32..4, ops in proptest::collection::vec(op(), 0..60)) {
        let g = Arc::new(Gate::new(max));
        let mut tickets: Vec<Option<Ticket<Arc<Gate>>>> = (0..6).map(|_| None).collect();
        let mut held = [false; 6];
        let mut high = 0u64;
        for op in ops {
            match op {
                Op::Enter(i) => {
                    let t = tickets[i].get_or_insert_with(|| Ticket::new(g.clone()));
                    let n = held.iter().filter(|h| **h).count() as u64;
                    let want = if held[i] { Entry::AlreadyIn }
                        else if n < u64::from(max) { Entry::Entered } else { Entry::Refused };
                    prop_assert_eq!(t.enter(), want);
                    if want == Entry::Entered { held[i] = true; }
                }
                Op::Leave(i) => {
                    let left = tickets[i].as_ref().map(|t| t.leave()).unwrap_or(false);
                    prop_assert_eq!(left, held[i]);
                    held[i] = false;
                }
                Op::Drop(i) => { tickets[i] = None; held[i] = false; }
                Op::Take => {
                    let n = held.iter().filter(|h| **h).count() as u64;
                    prop_assert_eq!(g.take_interval().high_water, high);
                    high = n;
                }
            }
            let n = held.iter().filter(|h| **h).count() as u64;
            high = high.max(n);
            prop_assert_eq!(g.in_flight(), n);
            prop_assert!(n <= u64::from(max));
        }
    }
}
