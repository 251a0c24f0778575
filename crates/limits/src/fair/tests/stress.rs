//! Threads acquiring by flow, queueing, cancelling and releasing at once on
//! one fair limiter: the limit holds, every waiter is admitted or cancelled
//! exactly once, and everything drains (no lost wake-up, no leaked flow).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use parking_lot::Mutex;

use crate::slots::{Permit, Slots, Waiter};
use crate::{FairConfig, FlowTry};

type Pool = Arc<Mutex<Vec<Permit<W>>>>;

struct W {
    id: usize,
    fates: Arc<Vec<AtomicUsize>>,
    pool: Pool,
    max_seen: Arc<AtomicU32>,
}

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        self.max_seen
            .fetch_max(permit.slots().active(), Ordering::SeqCst);
        self.fates[self.id].fetch_add(1, Ordering::SeqCst);
        self.pool.lock().push(permit);
        Ok(())
    }
}

/// Pops under the lock, drops outside it (the release may admit a waiter,
/// which pushes to the pool).
fn release_one(pool: &Pool) -> bool {
    let p = pool.lock().pop();
    p.is_some()
}

fn run(cfg: FairConfig) {
    const LIMIT: u32 = 3;
    const THREADS: usize = 4;
    const ROUNDS: usize = 3_000;
    let s: Arc<Slots<W>> = Slots::fair(LIMIT, cfg);
    let fates: Arc<Vec<AtomicUsize>> =
        Arc::new((0..THREADS * ROUNDS).map(|_| AtomicUsize::new(0)).collect());
    let queued: Arc<Vec<AtomicUsize>> =
        Arc::new((0..THREADS * ROUNDS).map(|_| AtomicUsize::new(0)).collect());
    let pool: Pool = Arc::default();
    let max_seen = Arc::new(AtomicU32::new(0));
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, fates, queued, pool, max_seen, start) = (
                s.clone(),
                fates.clone(),
                queued.clone(),
                pool.clone(),
                max_seen.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                start.wait();
                for i in 0..ROUNDS {
                    let flow = ((i * 7 + t) % 5) as u64;
                    match s.try_acquire_flow(flow) {
                        FlowTry::Go(p) => {
                            max_seen.fetch_max(s.active(), Ordering::SeqCst);
                            pool.lock().push(p);
                        }
                        FlowTry::Over => {}
                        FlowTry::Wait => {
                            let id = t * ROUNDS + i;
                            queued[id].store(1, Ordering::SeqCst);
                            let ticket = s.enqueue_flow(
                                flow,
                                W {
                                    id,
                                    fates: fates.clone(),
                                    pool: pool.clone(),
                                    max_seen: max_seen.clone(),
                                },
                            );
                            if (i + t) % 3 == 0 && ticket.cancel().is_some() {
                                fates[id].fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    if i % 2 == 1 || s.waiting() > 0 {
                        release_one(&pool);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("stress thread");
    }
    for _ in 0..LIMIT as usize + THREADS * ROUNDS {
        if !release_one(&pool) {
            break;
        }
    }
    assert!(max_seen.load(Ordering::SeqCst) <= LIMIT);
    assert_eq!((s.active(), s.waiting()), (0, 0), "must drain");
    assert_eq!(s.fair_stats().flows, 0, "no flow left counted");
    let wrong = (0..THREADS * ROUNDS)
        .filter(|&i| fates[i].load(Ordering::SeqCst) != queued[i].load(Ordering::SeqCst))
        .count();
    assert_eq!(wrong, 0, "waiters not admitted-or-cancelled exactly once");
    let n: usize = queued.iter().map(|q| q.load(Ordering::SeqCst)).sum();
    assert!(n > 1000, "only {n} waited: the run proved little");
}

#[test]
fn concurrent_stress_keeps_invariants() {
    run(FairConfig::default());
    run(FairConfig {
        flow_slots: Some(1),
        strict: true,
        ..FairConfig::default()
    });
}
