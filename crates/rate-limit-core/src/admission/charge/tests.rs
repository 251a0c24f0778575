use std::sync::Arc;
use std::time::Duration;

use limits::{Clock, ManualClock, Nanos, Permit, Waiter, NANOS_PER_SEC};
use proptest::prelude::*;

use crate::{Admission, Limiter, Limits, Options};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

type L = Arc<Limiter<W, Arc<ManualClock>>>;

const S: Nanos = NANOS_PER_SEC;

fn build(args: &[&str]) -> (L, Arc<ManualClock>) {
    let o = Options::parse("http://x/", args).unwrap();
    let clock = Arc::new(ManualClock::new(100 * S));
    let limits = Limits::of(&o);
    let l = match (&o.key, &o.peer) {
        (Some(_), Some(_)) => Limiter::peered(limits, o.keys, 100, clock.clone()),
        (Some(_), None) => Limiter::keyed(limits, o.keys, clock.clone()),
        _ => Limiter::new(limits, clock.clone()),
    };
    if o.count_status.is_some() {
        l.set_charge_on_response();
    }
    (l, clock)
}

fn goes(a: Admission<W, Arc<ManualClock>>) -> bool {
    match a {
        Admission::Go(_) => true,
        Admission::Wait(_) => panic!("a checked rate never waits"),
        Admission::Reject(_) => false,
    }
}

#[test]
fn requests_are_checked_and_only_charges_empty_the_bucket() {
    let (l, clock) = build(&["--rate=1", "--burst=3", "--queue=10", "--count-status=401"]);
    // Successes (never charged) pass however many there are.
    for _ in 0..50 {
        assert!(goes(l.admit_rule()));
    }
    for _ in 0..3 {
        assert!(goes(l.admit_rule()));
        assert!(l.charge(None));
    }
    // Empty: refused at once (no rate wait, though a queue is allowed),
    // and a refusal takes nothing.
    for _ in 0..5 {
        assert!(!goes(l.admit_rule()));
    }
    clock.advance(Duration::from_secs(1));
    assert!(goes(l.admit_rule()), "one token back after 1/rate");
    assert!(goes(l.admit_rule()), "a check takes nothing");
    assert!(l.charge(None));
    assert!(!goes(l.admit_rule()));
}

#[test]
fn keys_are_charged_apart() {
    let (l, clock) = build(&["--rate=1", "--burst=2", "--key=ip", "--count-status=4xx"]);
    let t = l.keys().unwrap();
    let (a, b) = (t.hash(b"a"), t.hash(b"b"));
    for _ in 0..2 {
        assert!(goes(l.admit_key(a)));
        assert!(l.charge(Some(a)));
    }
    assert!(!goes(l.admit_key(a)));
    assert!(goes(l.admit_key(b)), "another key is unaffected");
    assert!(!l.charge(None), "a keyed limiter charges keys only");
    // Charges of requests in flight together all count in full: ten
    // more below empty are (10 + 1) s to the next token.
    for _ in 0..10 {
        assert!(l.charge(Some(a)));
    }
    clock.advance(Duration::from_nanos(11 * S - 1));
    assert!(!goes(l.admit_key(a)));
    clock.advance(Duration::from_nanos(1));
    assert!(goes(l.admit_key(a)));
}

#[test]
fn a_locked_out_key_outlasts_idle_keys_in_a_full_table() {
    let o = Options::parse(
        "http://x/",
        &["--rate=1", "--burst=2", "--key=ip", "--count-status=401"],
    )
    .unwrap();
    let clock = Arc::new(ManualClock::new(100 * S));
    // Room for two keys.
    let l: L = Limiter::keyed(Limits::of(&o), 2, clock.clone());
    l.set_charge_on_response();
    let t = l.keys().unwrap();
    let (a, b) = (t.hash(b"a"), t.hash(b"b"));
    for _ in 0..2 {
        assert!(goes(l.admit_key(a)));
        assert!(l.charge(Some(a)));
    }
    assert!(!goes(l.admit_key(a)), "locked out");
    // New clients come and go, each with a few requests (checked,
    // never charged): they push out each other, not the locked-out key,
    // whose debt would go with it.
    for i in 0..50u32 {
        for _ in 0..3 {
            assert!(goes(l.admit_key(t.hash(&i.to_le_bytes()))));
        }
    }
    assert!(!goes(l.admit_key(a)), "still locked out");
    // With every key locked out, a new client still finds room.
    for _ in 0..2 {
        assert!(goes(l.admit_key(b)));
        assert!(l.charge(Some(b)));
    }
    assert!(goes(l.admit_key(t.hash(b"new"))), "a locked key yields");
    assert!(l.keys().is_some_and(|t| t.len() <= 2));
}

#[test]
fn with_a_limit_the_slots_still_count_requests() {
    let (l, _) = build(&[
        "--rate=1",
        "--burst=5",
        "--limit=1",
        "--queue=0",
        "--count-status=401",
    ]);
    let Admission::Go(Some(p)) = l.admit_rule() else {
        panic!("the first takes the slot")
    };
    assert!(!goes(l.admit_rule()), "at the limit with a full bucket");
    drop(p);
    assert!(goes(l.admit_rule()));
    // The slot refusal gave nothing back: the bucket is as it was.
    assert_eq!(l.remaining(None).1.map(|q| q.remaining), Some(5));
}

#[test]
fn peered_charges_are_reported_under_the_tag() {
    let (l, _) = build(&[
        "--rate=1",
        "--burst=5",
        "--key=ip",
        "--group=g",
        "--peers=127.0.0.1:5000",
        "--peer-secret-file=/k",
        "--count-status=401",
    ]);
    let k = l.keys().unwrap().hash(b"tag-a");
    assert!(goes(l.admit_key_tagged(k, b"tag-a")));
    assert!(goes(l.admit_key_tagged(k, b"tag-a")));
    assert!(l.peer_report(10).entries.is_empty(), "checks are not hits");
    assert!(l.charge(Some(k)));
    let r = l.peer_report(10);
    assert_eq!(r.entries.len(), 1);
    assert_eq!((&*r.entries[0].0, r.entries[0].1), (&b"tag-a"[..], 1));
    // A peer's hits empty the bucket for the check too.
    assert!(l.apply_peer(b"tag-a", 10));
    assert!(!goes(l.admit_key_tagged(k, b"tag-a")));
}

proptest! {
    /// Model of concurrency: rounds of `c` requests in flight together
    /// (all checked, then all failing and charged). Each charge costs
    /// its 1/rate however deep the debt, so charged responses never
    /// exceed burst + rate·t + c (one round passing on the last token).
    #[test]
    fn in_flight_rounds_never_get_more_than_burst_plus_rate_plus_in_flight(
        rate in 1u32..50,
        burst in 1u32..20,
        c in 1u64..200,
        keyed: bool,
        gaps in proptest::collection::vec(0u64..2000, 1..200),
    ) {
        let (r, b) = (rate.to_string(), burst.to_string());
        let mut args = vec!["--rate", &r, "--burst", &b, "--count-status=401"];
        if keyed {
            args.push("--key=ip");
        }
        let (l, clock) = build(&args);
        let key = l.keys().map(|t| t.hash(b"client"));
        let start = clock.now();
        let interval = S / u64::from(rate);
        let mut charged = 0u64;
        for gap_ms in gaps {
            clock.advance(Duration::from_millis(gap_ms));
            let passed = (0..c).filter(|_| goes(l.admit_in_scope(key, &[]))).count();
            for _ in 0..passed {
                prop_assert!(l.charge(key));
            }
            charged += passed as u64;
            let bound = u64::from(burst) + (clock.now() - start) / interval + c;
            prop_assert!(charged <= bound, "charged {} > {}", charged, bound);
        }
    }

    /// Model: one client after another, each request checked, and
    /// charged when its (arbitrary) response is listed. Charged
    /// responses never exceed burst + rate·t, and every request the
    /// check lets through while the bucket has a token goes on.
    #[test]
    fn never_more_than_burst_plus_rate_charged(
        rate in 1u32..50,
        burst in 1u32..20,
        keyed: bool,
        steps in proptest::collection::vec((0u64..300, proptest::bool::ANY), 1..300),
    ) {
        let (r, b) = (rate.to_string(), burst.to_string());
        let mut args = vec!["--rate", &r, "--burst", &b, "--count-status=401"];
        if keyed {
            args.push("--key=ip");
        }
        let (l, clock) = build(&args);
        let key = l.keys().map(|t| t.hash(b"client"));
        let start = clock.now();
        let interval = S / u64::from(rate);
        let mut charged = 0u64;
        for (gap_ms, failed) in steps {
            clock.advance(Duration::from_millis(gap_ms));
            let quota = l.remaining(key).1.map(|q| q.remaining);
            let went = goes(l.admit_in_scope(key, &[]));
            prop_assert_eq!(went, quota.is_some_and(|q| q > 0));
            if went && failed {
                prop_assert!(l.charge(key));
                charged += 1;
            }
            let bound = u64::from(burst) + (clock.now() - start) / interval;
            prop_assert!(charged <= bound, "charged {} > {}", charged, bound);
        }
    }
}
