use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use limits::{Permit, Waiter};

use super::SessionSlots;

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

/// Counts its drops: a slot given back.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn the_first_slot_of_a_limiter_is_kept_and_a_racing_second_given_back() {
    let freed = Arc::new(AtomicUsize::new(0));
    let s: SessionSlots<Slot, W> = SessionSlots::default();
    assert!(!s.admitted(1) && !s.holds_any());
    s.keep(1, Some(Slot(freed.clone())));
    assert!(s.admitted(1) && s.holds_any() && !s.admitted(2));
    s.keep(1, Some(Slot(freed.clone())));
    assert_eq!(
        freed.load(Ordering::Relaxed),
        1,
        "the second is dropped at once"
    );
    // Admitted by a limiter without slots: admitted, holding nothing.
    let t: SessionSlots<Slot, W> = SessionSlots::default();
    t.keep(2, None);
    assert!(t.admitted(2) && !t.holds_any());
    drop(s);
    assert_eq!(
        freed.load(Ordering::Relaxed),
        2,
        "the kept slot goes with the session"
    );
}

#[test]
fn a_dry_run_admission_is_remembered_per_limiter_once() {
    let s: SessionSlots<Slot, W> = SessionSlots::default();
    s.keep_dry(3);
    s.keep_dry(3);
    assert!(s.dry_admitted(3) && !s.dry_admitted(4) && !s.admitted(3));
    assert_eq!(s.dry.lock().len(), 1);
}
