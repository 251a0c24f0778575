use super::*;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Barrier};

#[test]
fn the_owner_frees_a_hook_no_transaction_holds() {
    let h = Holders::new();
    assert!(h.retire());
}

#[test]
fn the_last_close_after_the_owner_let_go_frees_it() {
    let h = Holders::new();
    h.add();
    h.add();
    assert!(!h.close(), "the owner still holds it");
    assert!(!h.retire(), "a transaction still holds it");
    assert!(h.close(), "the last holder frees it");
}

#[test]
fn closes_racing_the_owner_free_it_exactly_once() {
    for round in 0..200 {
        let h = Arc::new(Holders::new());
        let threads = 4;
        for _ in 0..threads * 8 {
            h.add();
        }
        let freed = Arc::new(AtomicU32::new(0));
        let start = Arc::new(Barrier::new(threads + 1));
        let closers: Vec<_> = (0..threads)
            .map(|_| {
                let (h, freed, start) = (h.clone(), freed.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..8 {
                        if h.close() {
                            freed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        start.wait();
        if h.retire() {
            freed.fetch_add(1, Ordering::Relaxed);
        }
        for c in closers {
            c.join().expect("closer");
        }
        assert_eq!(freed.load(Ordering::Relaxed), 1, "round {round}");
    }
}
