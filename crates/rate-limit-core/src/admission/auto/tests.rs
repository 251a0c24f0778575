use std::sync::Arc;

use limits::{ManualClock, Permit, Waiter, NANOS_PER_SEC};

use crate::{Admission, Limiter, Limits, Options};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

type L = Arc<Limiter<W, Arc<ManualClock>>>;

fn build(args: &[&str]) -> L {
    let o = Options::parse("http://x/", args).unwrap();
    Limiter::for_options(&o, Arc::new(ManualClock::new(NANOS_PER_SEC)))
}

fn slots_free(l: &L) -> usize {
    let mut held = Vec::new();
    while let Admission::Go(Some(p)) = l.admit_in_scope(None, &[]) {
        held.push(p);
        assert!(held.len() <= 10_000, "no limit");
    }
    held.len()
}

#[test]
fn the_slots_start_at_the_controllers_limit_and_follow_a_pin() {
    let l = build(&["--limit=auto", "--queue=0"]);
    assert!(l.is_auto());
    let start = l.auto_state().map(|s| s.limit);
    assert_eq!(start, Some(20), "crates/adaptive's start");
    assert_eq!(slots_free(&l), 20);
    assert_eq!(l.pin_limit(Some(7)), Some(7));
    assert_eq!(slots_free(&l), 7);
    assert_eq!(l.auto_state().map(|s| s.pinned), Some(true));
    assert_eq!(l.pin_limit(None), Some(7), "learning resumes from the pin");
    assert_eq!(l.auto_state().map(|s| s.pinned), Some(false));
    // A fixed limit has no controller.
    let fixed = build(&["--limit=5"]);
    assert!(!fixed.is_auto());
    assert_eq!(fixed.pin_limit(Some(3)), None);
    assert_eq!(fixed.auto_state(), None);
}

#[test]
fn bounds_clamp_the_start_and_a_reload_keeps_the_learned_limit() {
    let l = build(&[
        "--limit=auto",
        "--limit-min=2",
        "--limit-max=8",
        "--queue=0",
    ]);
    assert_eq!(slots_free(&l), 8, "the start, clamped to --limit-max");
    l.pin_limit(Some(3));
    let o = Options::parse(
        "http://x/",
        &["--limit=auto", "--limit-min=2", "--limit-max=8"],
    )
    .unwrap();
    l.reconfigure(Limits::of(&o)).unwrap();
    assert_eq!(slots_free(&l), 3, "the file's start does not reset it");
    // Fixed to auto (or back) is another limiter.
    let fixed = Options::parse("http://x/", &["--limit=8"]).unwrap();
    assert_eq!(l.reconfigure(Limits::of(&fixed)), Err("--limit"));
}
