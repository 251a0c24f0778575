//! Detached permits: a slot held without its permit and released once by
//! its holder's own event (rate_limit's rule TXN_CLOSE hook).

use super::*;

#[test]
fn a_detached_permit_keeps_its_slot_until_released_detached() {
    let s: Arc<Slots<Rec>> = Slots::new(1);
    let (log, held) = (Arc::default(), Arc::default());
    assert!(s.try_acquire().unwrap().detach().is_ok());
    // Detaching dropped the permit, not the slot.
    assert_eq!(s.active(), 1);
    assert!(s.try_acquire().is_none());
    let _t = s.enqueue(rec(7, &log, &held));
    assert!(log.lock().is_empty());
    // The owed release frees it as the permit's drop would: the waiter gets it.
    s.release_detached();
    assert_eq!(*log.lock(), [7]);
    assert_eq!((s.active(), s.waiting()), (1, 0));
    held.lock().clear();
    assert_eq!(s.active(), 0);
}

#[test]
fn a_fair_permit_is_not_detached() {
    let s: Arc<Slots<Rec>> = Slots::fair(1, crate::fair::FairConfig::default());
    let p = s.try_acquire().unwrap();
    let p = p.detach().expect_err("a fair permit goes back to its flow");
    assert_eq!(s.active(), 1);
    drop(p);
    assert_eq!(s.active(), 0);
}

#[test]
fn a_slot_is_taken_detached_only_if_free_and_nobody_waits() {
    let s: Arc<Slots<Rec>> = Slots::new(2);
    let (log, held) = (Arc::default(), Arc::default());
    assert!(s.try_acquire_detached());
    let p = s.try_acquire().unwrap();
    assert!(!s.try_acquire_detached(), "full");
    let _t = s.enqueue(rec(1, &log, &held));
    let _t2 = s.enqueue(rec(2, &log, &held));
    // The detached holder's release goes to the first waiter; with one
    // still waiting, no slot is taken past it.
    s.release_detached();
    assert_eq!(*log.lock(), [1]);
    assert!(!s.try_acquire_detached(), "a waiter is first");
    drop(p);
    assert_eq!(*log.lock(), [1, 2]);
    assert_eq!((s.active(), s.waiting()), (2, 0));
    held.lock().clear();
    assert_eq!(s.active(), 0);
    // A fair limiter's `waiting` always has FAIR_BIT: never detached.
    let f: Arc<Slots<Rec>> = Slots::fair(1, crate::fair::FairConfig::default());
    assert!(!f.try_acquire_detached());
    assert_eq!(f.active(), 0);
}
