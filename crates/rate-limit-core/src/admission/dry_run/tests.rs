use std::sync::Arc;

use limits::{ManualClock, Permit, NANOS_PER_SEC};

use super::super::{Admission, Limiter, Limits, Refused};

struct W;
impl limits::Waiter for W {
    fn admit(self, _: Permit<Self>) -> Result<(), Permit<Self>> {
        Ok(())
    }
}

fn limits() -> Limits {
    // --rate=1 --burst=1 --queue=1
    Limits {
        limit: None,
        rate: Some((1.0, 1)),
        queue: 1,
        maxage: None,
        block: None,
        auto: None,
    }
}

/// (admitted, waited, refused) for `n` simultaneous requests; `dry`
/// settles each wait as a dry run does, the live run keeps them.
fn flood(
    l: &Arc<Limiter<W, Arc<ManualClock>>>,
    key: Option<u64>,
    n: usize,
    dry: bool,
) -> (usize, usize, usize) {
    let (mut go, mut waited, mut refused) = (0, 0, 0);
    let mut kept = Vec::new();
    for _ in 0..n {
        match l.admit_in_scope(key, &[]) {
            Admission::Go(_) => go += 1,
            Admission::Wait(w) if dry => match l.settle_dry_wait(w) {
                Ok(()) => waited += 1,
                Err(Refused::Rate) => refused += 1,
                Err(e) => panic!("unexpected {e:?}"),
            },
            Admission::Wait(w) => {
                waited += 1;
                kept.push(w);
            }
            Admission::Reject(Refused::Rate) => refused += 1,
            Admission::Reject(e) => panic!("unexpected {e:?}"),
        }
    }
    // Served: the live waits keep their tokens.
    for w in kept {
        if let Some(t) = w.rate {
            t.spend();
        }
    }
    (go, waited, refused)
}

#[test]
fn dry_flood_counts_as_live_and_runs_up_no_debt() {
    for key in [None, Some(7)] {
        let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
        let mk = |c: &Arc<ManualClock>| match key {
            None => Limiter::new(limits(), c.clone()),
            Some(_) => Limiter::keyed(limits(), 16, c.clone()),
        };
        let live = mk(&clock);
        let dry = mk(&clock);
        let l = flood(&live, key, 100, false);
        let d = flood(&dry, key, 100, true);
        assert_eq!(l, (1, 1, 98), "live, key {key:?}");
        assert_eq!(
            d, l,
            "a dry run counts what the live rule does, key {key:?}"
        );
        // Two intervals later, both buckets are full again: no debt.
        clock.advance(std::time::Duration::from_secs(2));
        assert!(
            matches!(dry.admit_in_scope(key, &[]), Admission::Go(_)),
            "key {key:?}"
        );
        assert!(
            matches!(live.admit_in_scope(key, &[]), Admission::Go(_)),
            "key {key:?}"
        );
    }
}
