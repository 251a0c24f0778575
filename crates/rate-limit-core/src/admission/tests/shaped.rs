//! Limiters seen as their shapes: each handle makes its own `Key` or
//! `Flow`, and a request's `Counted` reaches the same state through every
//! later call.

use super::*;

fn shape<C: limits::Clock>(l: &Arc<Limiter<W, C>>) -> &'static str {
    match l.shaped() {
        Shaped::Rule(_) => "rule",
        Shaped::Fair(_) => "fair",
        Shaped::Keyed(_) => "keyed",
    }
}

#[test]
fn each_limiter_has_its_shape() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let o = crate::Options::parse("http://a/", &["--limit=2", "--fair=ip"]).unwrap();
    let fair = Limiter::<W, _>::fair(Limits::of(&o), o.fair.as_ref().unwrap(), clock.clone());
    assert_eq!(shape(&fair), "fair");
    assert_eq!(
        shape(&Limiter::<W, _>::new(
            lim(Some(2), None, 0, 0),
            clock.clone()
        )),
        "rule"
    );
    let keyed = Limiter::<W, _>::keyed(lim(Some(2), None, 0, 0), 16, clock.clone());
    assert_eq!(shape(&keyed), "keyed");
    let peered = Limiter::<W, _>::peered(lim(None, Some((1.0, 1)), 0, 0), 16, 16, clock);
    assert_eq!(shape(&peered), "keyed");
}

#[test]
fn a_key_counts_against_its_own_slots_through_every_call() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let l = Limiter::<W, _>::keyed(lim(Some(1), Some((1.0, 1)), 0, 0), 16, clock);
    let Shaped::Keyed(k) = l.shaped() else {
        panic!("keyed")
    };
    let (a, b) = (k.key(b"a"), k.key(b"b"));
    assert_ne!(a, b);
    assert_eq!(a, k.key(b"a"), "a key is a function of its bytes");
    let shaped = l.shaped();
    let Admission::Go(Some(permit)) = shaped.admit(Counted::Key(a), &[]) else {
        panic!("a's first request goes")
    };
    // a holds its one slot and spent its token; b has both.
    assert_eq!(shaped.remaining(Counted::Key(a)).0, Some(0));
    assert_eq!(shaped.remaining(Counted::Key(b)).0, Some(1));
    assert!(matches!(k.admit(b, &[]), Admission::Go(Some(_))));
    assert!(matches!(
        shaped.admit(Counted::Key(a), &[]),
        Admission::Reject(_)
    ));
    // A keyed limiter refuses a request counted against nobody's key, and
    // a flow (of another limiter) is nobody's key.
    assert!(matches!(
        shaped.admit(Counted::Rule, &[]),
        Admission::Reject(Refused::KeyMissing)
    ));
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let o = crate::Options::parse("http://a/", &["--limit=2", "--fair=ip"]).unwrap();
    let fair = Limiter::<W, _>::fair(Limits::of(&o), o.fair.as_ref().unwrap(), clock);
    let Shaped::Fair(f) = fair.shaped() else {
        panic!("fair")
    };
    assert!(matches!(
        shaped.admit(Counted::Flow(f.flow(b"a")), &[]),
        Admission::Reject(Refused::KeyMissing)
    ));
    assert!(!shaped.charge(Counted::Flow(f.flow(b"a"))));
    drop(permit);
    assert_eq!(shaped.remaining(Counted::Key(a)).0, Some(1));
}

#[test]
fn a_flow_is_made_by_its_fair_limiter() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let o = crate::Options::parse("http://a/", &["--limit=2", "--fair=ip", "--strict"]).unwrap();
    let l = Limiter::<W, _>::fair(Limits::of(&o), o.fair.as_ref().unwrap(), clock);
    let Shaped::Fair(f) = l.shaped() else {
        panic!("fair")
    };
    let (x, y) = (f.flow(b"x"), f.flow(b"y"));
    assert_ne!(x, y);
    // Strict fair shares of 2 slots: one each while both flows hold one.
    let px = f.admit(x);
    let py = f.admit(y);
    assert!(matches!(
        (&px, &py),
        (Admission::Go(Some(_)), Admission::Go(Some(_)))
    ));
    assert_eq!(l.shaped().remaining(Counted::Flow(x)).0, Some(0));
}
