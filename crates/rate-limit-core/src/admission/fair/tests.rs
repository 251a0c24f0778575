use std::sync::Arc;

use limits::{ManualClock, Permit, Waiter, NANOS_PER_SEC};
use parking_lot::Mutex;

use super::*;
use crate::{Admission, Options, SlotWait};

type Held = Arc<Mutex<Vec<(usize, Permit<W>)>>>;

struct W(usize, Held);

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        self.1.lock().push((self.0, permit));
        Ok(())
    }
}

fn fair(args: &[&str]) -> Arc<Limiter<W, Arc<ManualClock>>> {
    fair_at(args, Arc::new(ManualClock::new(NANOS_PER_SEC)))
}

fn fair_at(args: &[&str], clock: Arc<ManualClock>) -> Arc<Limiter<W, Arc<ManualClock>>> {
    let o = Options::parse("http://a.example/", args).unwrap();
    Limiter::fair(Limits::of(&o), o.fair.as_ref().unwrap(), clock)
}

/// Admits `flow` or queues it (`id`) for a slot as the plugin does.
fn arrive(
    l: &Arc<Limiter<W, Arc<ManualClock>>>,
    flow: u64,
    id: usize,
    held: &Held,
) -> &'static str {
    match l.admit_flow(flow) {
        Admission::Go(Some(p)) => {
            held.lock().push((id, p));
            "go"
        }
        Admission::Go(None) => unreachable!("a fair limiter has slots"),
        Admission::Wait(wait) => {
            // As the plugin does after any rate wait (no timer here).
            match l.wait_for_slot(wait.since, W(id, held.clone()), Some(flow)) {
                SlotWait::Queued { ticket, .. } => std::mem::forget(ticket),
                // Dropping `wait` gives its rate token and place back.
                SlotWait::Refused(_) => return "reject",
                _ => unreachable!("no maxage"),
            }
            drop(wait.place);
            "wait"
        }
        Admission::Reject(_) => "reject",
    }
}

#[test]
fn flows_share_the_limit_and_take_turns() {
    let l = fair(&["--limit=2", "--fair=header:X-User", "--queue=100"]);
    let held = Held::default();
    let (a, b) = (l.flow_key(b"a"), l.flow_key(b"b"));
    assert_eq!(arrive(&l, a, 0, &held), "go");
    assert_eq!(arrive(&l, a, 1, &held), "go");
    for id in 2..6 {
        assert_eq!(arrive(&l, a, id, &held), "wait");
    }
    assert_eq!(arrive(&l, b, 100, &held), "wait");
    // A freed slot goes to flow b, not to a's older waiters.
    let first = held.lock().remove(0);
    drop(first);
    assert_eq!(held.lock().last().map(|h| h.0), Some(100));
    assert_eq!(l.fair_stats().map(|s| s.flows), Some(2));
}

#[test]
fn a_hard_limit_refuses_at_once_and_gives_the_rate_token_back() {
    let l = fair(&[
        "--limit=4",
        "--rate=1",
        "--burst=2",
        "--fair=ip",
        "--flow-slots=1",
        "--flow-over=reject",
        "--strict",
    ]);
    let held = Held::default();
    let a = l.flow_key(b"a");
    assert_eq!(arrive(&l, a, 0, &held), "go");
    assert_eq!(arrive(&l, a, 1, &held), "reject");
    assert_eq!(l.fair_stats().map(|s| s.flow_rejected), Some(1));
    // The refused request's token went back: one more is within the burst.
    assert_eq!(arrive(&l, l.flow_key(b"b"), 2, &held), "go");
}

#[test]
fn a_hard_limit_also_refuses_a_request_that_first_waited_for_the_rate() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let l = fair_at(
        &[
            "--limit=4",
            "--rate=1",
            "--burst=1",
            "--fair=ip",
            "--flow-slots=1",
            "--flow-over=reject",
            "--strict",
        ],
        clock.clone(),
    );
    let held = Held::default();
    let a = l.flow_key(b"a");
    assert_eq!(arrive(&l, a, 0, &held), "go");
    for id in 1..4 {
        // Over the rate: it waits for a token, then joins its flow at its share.
        assert_eq!(arrive(&l, a, id, &held), "reject", "request {id}");
    }
    assert_eq!(l.fair_stats().map(|s| s.flow_rejected), Some(3));
    assert_eq!(l.queued(), 0, "places given back");
    // Their tokens went back: a second later another flow goes at once.
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(arrive(&l, l.flow_key(b"b"), 9, &held), "go");
}

#[test]
fn one_flow_waits_in_at_most_its_part_of_the_queue() {
    let l = fair(&["--limit=1", "--queue=4", "--fair=header:X-User"]);
    let held = Held::default();
    let (a, b, c) = (l.flow_key(b"a"), l.flow_key(b"b"), l.flow_key(b"c"));
    assert_eq!(arrive(&l, b, 0, &held), "go");
    // Flows a and b active: a's part is ceil(4 / 2) = 2 places.
    assert_eq!(arrive(&l, a, 1, &held), "wait");
    assert_eq!(arrive(&l, a, 2, &held), "wait");
    assert_eq!(arrive(&l, a, 3, &held), "reject");
    assert_eq!(arrive(&l, a, 4, &held), "reject");
    // Places are left for another flow.
    assert_eq!(arrive(&l, c, 5, &held), "wait");
    assert_eq!(l.fair_stats().map(|s| s.flow_rejected), Some(0));
}

#[test]
fn changed_flow_options_apply_live() {
    let l = fair(&["--limit=4", "--fair=ip", "--flow-slots=1", "--strict"]);
    let held = Held::default();
    let a = l.flow_key(b"a");
    assert_eq!(arrive(&l, a, 0, &held), "go");
    assert_eq!(arrive(&l, a, 1, &held), "wait");
    let o = Options::parse(
        "http://a.example/",
        &["--limit=4", "--fair=ip", "--flow-slots=2"],
    )
    .unwrap();
    l.set_fair(o.fair.as_ref().unwrap());
    assert_eq!(held.lock().len(), 2, "the larger share admitted the waiter");
    assert!(fair(&["--limit=1", "--fair=ip"]).fair_stats().is_some());
}
