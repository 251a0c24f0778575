use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize};

/// Records admissions; keeps permits in a shared list so tests release them.
struct Rec {
    id: usize,
    log: Arc<Mutex<Vec<usize>>>,
    held: Arc<Mutex<Vec<Permit<Rec>>>>,
    decline: bool,
}

impl Waiter for Rec {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        if self.decline {
            return Err(permit);
        }
        self.log.lock().push(self.id);
        self.held.lock().push(permit);
        Ok(())
    }
}

fn rec(id: usize, log: &Arc<Mutex<Vec<usize>>>, held: &Arc<Mutex<Vec<Permit<Rec>>>>) -> Rec {
    Rec {
        id,
        log: log.clone(),
        held: held.clone(),
        decline: false,
    }
}

#[test]
fn fifo_hand_off_on_release() {
    let s: Arc<Slots<Rec>> = Slots::new(2);
    let (log, held) = (Arc::default(), Arc::default());
    let p1 = s.try_acquire().unwrap();
    let p2 = s.try_acquire().unwrap();
    assert!(s.try_acquire().is_none());
    let _t: Vec<_> = (0..3).map(|i| s.enqueue(rec(i, &log, &held))).collect();
    assert_eq!(s.waiting(), 3);
    drop(p1);
    assert_eq!(*log.lock(), [0]);
    drop(p2);
    assert_eq!(*log.lock(), [0, 1]);
    assert_eq!(s.active(), 2);
    // Newcomers do not overtake the waiter.
    assert!(s.try_acquire().is_none());
    // Release outside the lock: admit() takes it (see Waiter::admit).
    let first = held.lock().remove(0);
    drop(first);
    assert_eq!(*log.lock(), [0, 1, 2]);
    let rest = std::mem::take(&mut *held.lock());
    drop(rest);
    assert_eq!((s.active(), s.waiting()), (0, 0));
}

#[test]
fn raising_the_limit_admits_waiters_at_once_and_lowering_preempts_nobody() {
    let s: Arc<Slots<Rec>> = Slots::new(1);
    let (log, held) = (Arc::default(), Arc::default());
    let p = s.try_acquire().unwrap();
    let _t: Vec<_> = (0..3).map(|i| s.enqueue(rec(i, &log, &held))).collect();
    s.set_limit(3);
    assert_eq!(*log.lock(), [0, 1]);
    assert_eq!((s.active(), s.waiting()), (3, 1));
    s.set_limit(1);
    assert_eq!(
        s.active(),
        3,
        "holders above a lowered limit keep their slots"
    );
    drop(p);
    // Released outside the `held` lock: the hand-off pushes into it.
    let first = held.lock().remove(0);
    drop(first);
    assert_eq!(
        *log.lock(),
        [0, 1],
        "2 still held of a limit of 1: no hand-off"
    );
    let second = held.lock().remove(0);
    drop(second);
    assert_eq!(*log.lock(), [0, 1, 2]);
    assert_eq!((s.active(), s.waiting()), (1, 0));
}

#[test]
fn enqueue_with_free_slot_admits_at_once() {
    let s: Arc<Slots<Rec>> = Slots::new(1);
    let (log, held) = (Arc::default(), Arc::default());
    let t = s.enqueue(rec(7, &log, &held));
    assert_eq!(*log.lock(), [7]);
    assert!(!t.is_waiting());
    assert!(t.cancel().is_none());
    assert_eq!(s.active(), 1);
}

#[test]
fn cancelled_waiters_are_skipped_and_declines_pass_the_slot_on() {
    let s: Arc<Slots<Rec>> = Slots::new(1);
    let (log, held) = (Arc::<Mutex<Vec<usize>>>::default(), Arc::default());
    let p = s.try_acquire().unwrap();
    let t0 = s.enqueue(rec(0, &log, &held));
    let _t1 = s.enqueue(Rec {
        decline: true,
        ..rec(1, &log, &held)
    });
    let _t2 = s.enqueue(rec(2, &log, &held));
    assert_eq!(t0.cancel().map(|w| w.id), Some(0));
    assert_eq!(s.waiting(), 2);
    drop(p);
    assert_eq!(*log.lock(), [2]);
    assert_eq!((s.active(), s.waiting()), (1, 0));
}

#[test]
fn a_weak_ticket_cancels_a_waiter_and_keeps_nothing_alive() {
    for fair in [false, true] {
        let s: Arc<Slots<Rec>> = if fair {
            Slots::fair(1, crate::fair::FairConfig::default())
        } else {
            Slots::new(1)
        };
        let (log, held) = (Arc::<Mutex<Vec<usize>>>::default(), Arc::default());
        let p = s.try_acquire().unwrap();
        let w0 = s.enqueue(rec(0, &log, &held)).downgrade();
        let w1 = s.enqueue(rec(1, &log, &held)).downgrade();
        let w2 = s.enqueue(rec(2, &log, &held)).downgrade();
        // The tickets are gone; the queue keeps the entries.
        assert!(w0.is_waiting() && w1.is_waiting());
        assert_eq!(w1.cancel().map(|w| w.id), Some(1));
        assert!(!w1.is_waiting());
        assert!(w1.cancel().is_none(), "cancelled once");
        assert_eq!(s.waiting(), 2);
        drop(p);
        assert_eq!(*log.lock(), [0], "fair={fair}");
        assert!(!w0.is_waiting() && w0.cancel().is_none(), "admitted");
        assert!(w2.is_waiting());
    }
    // The limiter goes with its last strong owner, waiters and all.
    let s: Arc<Slots<Rec>> = Slots::new(0);
    let (log, held) = (Arc::default(), Arc::default());
    let w = s.enqueue(rec(0, &log, &held)).downgrade();
    assert!(w.is_waiting());
    drop(s);
    assert!(!w.is_waiting() && w.cancel().is_none());
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
    let s: Arc<Slots<Boom>> = Slots::new(1);
    let held = Arc::new(Mutex::new(Vec::new()));
    let p = s.try_acquire().unwrap();
    let _a = s.enqueue(Boom(true, held.clone()));
    let _b = s.enqueue(Boom(false, held.clone()));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p)));
    assert!(r.is_err(), "the panic reaches the caller");
    // ...but only after the slot went on to the next waiter.
    assert_eq!(held.lock().len(), 1);
    assert_eq!((s.active(), s.waiting()), (1, 0));
    // And this thread can still dispatch for this limiter.
    let p2 = held.lock().pop().unwrap();
    let _c = s.enqueue(Boom(false, held.clone()));
    drop(p2);
    assert_eq!((s.active(), s.waiting(), held.lock().len()), (1, 0, 1));
}

#[test]
fn remove_waiting_takes_out_only_matching_waiters() {
    let s: Arc<Slots<Rec>> = Slots::new(1);
    let (log, held) = (Arc::<Mutex<Vec<usize>>>::default(), Arc::default());
    let p = s.try_acquire().unwrap();
    let tickets: Vec<_> = (0..5).map(|i| s.enqueue(rec(i, &log, &held))).collect();
    let gone: Vec<usize> = s
        .remove_waiting(|w| w.id % 2 == 1)
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(gone, [1, 3]);
    assert_eq!(s.waiting(), 3);
    assert!(
        tickets[1].cancel().is_none(),
        "removed waiters are no longer cancellable"
    );
    drop(p);
    assert_eq!(*log.lock(), [0]);
    assert_eq!(s.queue.lock().entries.len(), 2);
}

#[test]
fn compaction_bounds_dead_entries() {
    let s: Arc<Slots<Rec>> = Slots::new(0);
    let (log, held) = (Arc::default(), Arc::default());
    for i in 0..10_000 {
        let t = s.enqueue(rec(i, &log, &held));
        assert!(t.cancel().is_some());
    }
    assert!(
        s.queue.lock().entries.len() <= 64,
        "{}",
        s.queue.lock().entries.len()
    );
    assert_eq!(s.waiting(), 0);
}

/// Threads acquiring, queueing, cancelling and releasing concurrently:
/// the limit is never exceeded, every waiter is admitted or cancelled
/// exactly once, and everything drains to zero.
#[test]
fn concurrent_stress_keeps_invariants() {
    const LIMIT: u32 = 3;
    const THREADS: usize = 4;
    const ROUNDS: usize = 5_000;
    /// What happened to waiter `id` (one per thread and round).
    #[derive(Default)]
    struct Fate {
        queued: AtomicBool,
        admitted: AtomicUsize,
        cancelled: AtomicUsize,
    }
    /// Permits held by anyone (acquired or admitted), released by whichever
    /// thread pops them: slots stay busy, so waiters really queue.
    type Pool = Arc<Mutex<Vec<Permit<W>>>>;
    struct W {
        id: usize,
        fates: Arc<Vec<Fate>>,
        pool: Pool,
        max_seen: Arc<AtomicU32>,
    }
    impl Waiter for W {
        fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
            self.max_seen
                .fetch_max(permit.slots().active(), Ordering::SeqCst);
            self.fates[self.id].admitted.fetch_add(1, Ordering::SeqCst);
            self.pool.lock().push(permit);
            Ok(())
        }
    }
    /// Releases a held permit, if any. Popped under the lock, dropped
    /// outside it: the release may admit a waiter, which pushes to the pool.
    fn release_one(pool: &Pool) -> bool {
        let p = pool.lock().pop();
        p.is_some()
    }
    let s: Arc<Slots<W>> = Slots::new(LIMIT);
    let fates: Arc<Vec<Fate>> = Arc::new((0..THREADS * ROUNDS).map(|_| Fate::default()).collect());
    let pool: Pool = Arc::default();
    let max_seen = Arc::new(AtomicU32::new(0));
    let start = Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, fates, pool, max_seen, start) = (
                s.clone(),
                fates.clone(),
                pool.clone(),
                max_seen.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                start.wait();
                for i in 0..ROUNDS {
                    if let Some(p) = s.try_acquire() {
                        max_seen.fetch_max(s.active(), Ordering::SeqCst);
                        pool.lock().push(p);
                    } else {
                        let id = t * ROUNDS + i;
                        fates[id].queued.store(true, Ordering::SeqCst);
                        let ticket = s.enqueue(W {
                            id,
                            fates: fates.clone(),
                            pool: pool.clone(),
                            max_seen: max_seen.clone(),
                        });
                        if (i + t) % 3 == 0 {
                            if let Some(w) = ticket.cancel() {
                                assert_eq!(w.id, id, "cancel returned another waiter");
                                fates[id].cancelled.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // One release per two arrivals, or per arrival while
                    // anyone waits: the slots stay full whatever the
                    // interleaving, so newcomers queue, and the queue stays
                    // short, so admissions race with cancellations (a few
                    // hundred cancels per run find their waiter admitted).
                    if i % 2 == 1 || s.waiting() > 0 {
                        release_one(&pool);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Whoever still waits is admitted as the last permits go: at most
    // one release per permit held now plus one per waiter.
    for _ in 0..LIMIT as usize + THREADS * ROUNDS {
        if !release_one(&pool) {
            break;
        }
    }
    assert!(max_seen.load(Ordering::SeqCst) <= LIMIT);
    assert_eq!((s.active(), s.waiting()), (0, 0), "queue must drain");
    // Exactly once: each queued waiter admitted or cancelled, never both,
    // never twice, never lost; nothing happens to one never queued.
    let (mut queued, mut admitted, mut cancelled) = (0, 0, 0);
    let mut wrong = Vec::new();
    for (id, f) in fates.iter().enumerate() {
        let (q, a, c) = (
            f.queued.load(Ordering::SeqCst),
            f.admitted.load(Ordering::SeqCst),
            f.cancelled.load(Ordering::SeqCst),
        );
        queued += usize::from(q);
        admitted += a;
        cancelled += c;
        if a + c != usize::from(q) {
            wrong.push((id, q, a, c));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} waiters not resolved exactly once (id, queued, admitted, cancelled), first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert_eq!(admitted + cancelled, queued);
    // Both outcomes must have happened, or the run proved nothing.
    assert!(
        admitted > 1000 && cancelled > 100,
        "admitted {admitted}, cancelled {cancelled} of {queued} queued"
    );
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque as Model;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Enqueue,
        Cancel(usize),
        Release(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Acquire),
            Just(Op::Enqueue),
            any::<usize>().prop_map(Op::Cancel),
            any::<usize>().prop_map(Op::Release)
        ]
    }

    proptest! {
        /// Against a sequential model: same admissions in the same (FIFO)
        /// order, never more than `limit` held, counts always agree.
        #[test]
        fn matches_sequential_model(limit in 0u32..4, ops in proptest::collection::vec(op(), 1..200)) {
            let s: Arc<Slots<Rec>> = Slots::new(limit);
            let log: Arc<Mutex<Vec<usize>>> = Arc::default();
            let held: Arc<Mutex<Vec<Permit<Rec>>>> = Arc::default();
            let mut tickets: Vec<Ticket<Rec>> = Vec::new();
            let (mut m_active, mut m_queue, mut m_log) = (0u32, Model::<usize>::new(), Vec::<usize>::new());
            let mut next_id = 0usize;
            for op in ops {
                match op {
                    Op::Acquire => {
                        let got = s.try_acquire();
                        let expect = m_queue.is_empty() && m_active < limit;
                        prop_assert_eq!(got.is_some(), expect);
                        if let Some(p) = got {
                            m_active += 1;
                            held.lock().push(p);
                        }
                    }
                    Op::Enqueue => {
                        let id = next_id;
                        next_id += 1;
                        m_queue.push_back(id);
                        tickets.push(s.enqueue(rec(id, &log, &held)));
                        while m_active < limit {
                            match m_queue.pop_front() {
                                Some(w) => { m_active += 1; m_log.push(w); }
                                None => break,
                            }
                        }
                    }
                    Op::Cancel(i) if !tickets.is_empty() => {
                        let t = &tickets[i % tickets.len()];
                        let id = t.cancel().map(|w| w.id);
                        let pos = id.and_then(|id| m_queue.iter().position(|&x| x == id));
                        prop_assert_eq!(id.is_some(), pos.is_some());
                        if let Some(pos) = pos {
                            m_queue.remove(pos);
                        }
                    }
                    Op::Release(i) if !held.lock().is_empty() => {
                        let p = { let mut h = held.lock(); let n = h.len(); h.remove(i % n) };
                        drop(p);
                        match m_queue.pop_front() {
                            Some(w) => m_log.push(w),
                            None => m_active -= 1,
                        }
                    }
                    _ => {}
                }
                prop_assert!(s.active() <= limit);
                prop_assert_eq!(s.active(), m_active);
                prop_assert_eq!(s.waiting() as usize, m_queue.len());
                prop_assert_eq!(&*log.lock(), &m_log);
            }
        }
    }
}

mod detach;
