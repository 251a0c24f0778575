//! A peered keyed limiter against DThrottle's worked example and bound.

use std::sync::Arc;
use std::time::Duration;

use limits::{ManualClock, Permit, Waiter, NANOS_PER_MS, NANOS_PER_SEC};
use proptest::prelude::*;

use super::*;
use crate::Admission;

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

type L = Arc<Limiter<W, Arc<ManualClock>>>;

fn peered(rate: f64, burst: u32, clock: &Arc<ManualClock>) -> L {
    let limits = Limits {
        limit: None,
        rate: Some((rate, burst)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    Limiter::peered(limits, 1000, 5000, clock.clone())
}

fn ask(l: &L, tag: &[u8]) -> bool {
    let key = l.keys().map_or(0, |t| t.hash(tag));
    matches!(l.admit_key_tagged(key, tag), Admission::Go(_))
}

fn exchange(from: &L, to: &[&L]) {
    for (tag, hits) in from.peer_report(100).entries {
        for l in to {
            assert!(l.apply_peer(&tag, hits));
        }
    }
}

/// The seed's table: burst 10, rate 1/s, period 5 s, two instances.
#[test]
fn the_seeds_worked_example() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let (a, b) = (peered(1.0, 10, &clock), peered(1.0, 10, &clock));
    let c: &[u8] = b"C";
    clock.advance(Duration::from_millis(100));
    assert!((0..9).all(|_| ask(&a, c)));
    assert!((0..8).all(|_| ask(&b, c)));
    clock.advance(Duration::from_millis(100));
    assert!(ask(&a, c), "A serves the 18th");
    assert!(!ask(&a, c), "A refuses the 19th");
    clock.set(6 * NANOS_PER_SEC); // t = 5
    let ra = a.peer_report(100);
    assert_eq!(ra.entries, vec![(Box::from(c), 10)]);
    for (tag, hits) in &ra.entries {
        b.apply_peer(tag, *hits);
    }
    exchange(&b, &[&a]);
    for l in [&a, &b] {
        let level = l.peer_level(c).unwrap();
        assert!((level + 3.0).abs() < 0.25, "{level}");
    }
    clock.advance(Duration::from_millis(200)); // t = 5.2
    assert!(!ask(&a, c) && !ask(&b, c));
    clock.set(NANOS_PER_SEC + 8_900 * NANOS_PER_MS); // t = 8.9
    assert!(!ask(&a, c));
    clock.set(NANOS_PER_SEC + 9_150 * NANOS_PER_MS); // t ≈ 9
    assert!(ask(&a, c), "admitted again at t ≈ 9 s");
}

#[test]
fn refunded_tokens_are_not_reported_and_debt_is_capped() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let a = peered(10.0, 5, &clock);
    let tag: &[u8] = b"198.51.100.1";
    let key = a.keys().map(|t| t.hash(tag));
    assert!(ask(&a, tag));
    a.refund_rate(key);
    assert!(a.peer_report(10).entries.is_empty());
    assert!(a.apply_peer(tag, u32::MAX));
    let level = a.peer_level(tag).unwrap();
    let cap = -(MAX_PEER_DEBT as f64 / (NANOS_PER_SEC as f64 / 10.0));
    assert!(level >= cap - 6.0 && level < cap + 6.0, "{level}");
    assert!(!a.apply_peer(b"", 3) && !a.apply_peer(tag, 0));
}

#[test]
fn reports_keep_the_heaviest_tags_and_debt_keys_yield_last() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let a = peered(1.0, 100, &clock);
    for (i, tag) in [b"a", b"b", b"c"].iter().enumerate() {
        for _ in 0..=i {
            assert!(ask(&a, *tag));
        }
    }
    let r = a.peer_report(2);
    assert_eq!(
        r.entries,
        vec![(Box::from(&b"c"[..]), 3), (Box::from(&b"b"[..]), 2)]
    );
    assert_eq!((r.dropped_tags, r.dropped_hits), (1, 1));
    assert!(a.peer_report(2).entries.is_empty(), "hits are reset");

    // A table of two keys: a key in debt stays while an idle key can go,
    // and yields rather than refuse a new key.
    let small = Limiter::<W, _>::peered(
        Limits {
            limit: None,
            rate: Some((1.0, 2)),
            queue: 0,
            maxage: None,
            block: None,
            auto: None,
        },
        2,
        100,
        clock.clone(),
    );
    assert!(small.apply_peer(b"x", 10));
    assert!(ask(&small, b"z"));
    assert!(ask(&small, b"y"), "z (unreported hit) makes room");
    assert!(small.peer_level(b"x").is_some(), "x in debt stays");
    assert!(small.peer_level(b"z").is_none());
    assert!(small.apply_peer(b"y", 10));
    assert!(ask(&small, b"w"), "all in debt: one yields");
    let r = small.peer_report(10);
    let hits = |t: &[u8]| r.entries.iter().find(|e| &*e.0 == t).map(|e| e.1);
    assert_eq!(
        (hits(b"z"), hits(b"y"), hits(b"w")),
        (Some(1), Some(1), Some(1))
    );
}

/// Issue 21: 2x `--keys` distinct client-chosen keys within one period,
/// then a new honest key is admitted; every hit reaches the next report
/// (the evicted keys' buffer holds `report_tags`, 5000 here).
#[test]
fn a_flood_of_one_off_keys_locks_nobody_out_and_keeps_the_hits() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let a = peered(1.0, 5, &clock); // --keys=1000
    for i in 0..2000u32 {
        assert!(ask(&a, format!("flood-{i}").as_bytes()), "flood key {i}");
    }
    assert!(ask(&a, b"honest"), "a new honest key is admitted");
    let r = a.peer_report(5000);
    let sent: u64 = r.entries.iter().map(|e| u64::from(e.1)).sum();
    assert_eq!((sent, r.entries.len(), r.dropped_tags), (2001, 2001, 0));
    assert!(r.entries.iter().any(|e| &*e.0 == b"honest"));
    assert!(
        a.peer_report(5000).entries.is_empty(),
        "each hit reported once"
    );
    // A peer's report of the flood puts nothing in debt (one hit each):
    // a second instance takes it all and still admits a new key.
    let b = peered(1.0, 5, &clock);
    for (tag, h) in &r.entries {
        b.apply_peer(tag, *h);
    }
    assert!(ask(&b, b"honest-2"));
}

/// Beyond `report_tags` evicted keys in one period, the lightest are
/// dropped and counted: every hit is sent or counted.
#[test]
fn evicted_hits_beyond_the_bound_are_counted() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let limits = Limits {
        limit: None,
        rate: Some((1.0, 5)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let a: L = Limiter::peered(limits, 100, 100, clock.clone());
    for i in 0..400u32 {
        assert!(ask(&a, format!("flood-{i}").as_bytes()));
    }
    let r = a.peer_report(100);
    let sent: u64 = r.entries.iter().map(|e| u64::from(e.1)).sum();
    assert_eq!(
        (sent, sent + r.dropped_hits, r.dropped_tags),
        (100, 400, 300)
    );
}

/// Keys in debt (peers' reports of clients over their rate) cannot lock new
/// clients out either: a table full of them yields one per new key.
#[test]
fn a_table_full_of_keys_in_debt_still_admits_new_keys() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let a = peered(1.0, 5, &clock);
    for i in 0..2000u32 {
        assert!(a.apply_peer(format!("debt-{i}").as_bytes(), 100));
    }
    for i in 0..100u32 {
        assert!(ask(&a, format!("new-{i}").as_bytes()), "new key {i}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// N instances, period P, delay d: a client spraying one tag at random
    /// instances gets at most b + 1 + rT + (N−1)(b + 1 + r(P+d)) requests
    /// in any window T.
    #[test]
    fn admitted_stay_within_the_bound(
        n in 2usize..5,
        period_ms in 100u64..2000,
        delay_ms in 0u64..200,
        gap_ms in 1u64..50,
        picks in proptest::collection::vec(0usize..5, 600),
    ) {
        let (rate, burst) = (5.0, 10u32);
        let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
        let ls: Vec<L> = (0..n).map(|_| peered(rate, burst, &clock)).collect();
        let tag: &[u8] = b"client";
        let mut admitted_at = Vec::new();
        // In flight: (arrival time, receiver, hits).
        let mut flight: Vec<(u64, usize, u32)> = Vec::new();
        let mut next_report = period_ms;
        let mut t = 0u64;
        for p in &picks {
            t += gap_ms;
            clock.set(NANOS_PER_SEC + t * NANOS_PER_MS);
            flight.retain(|&(at, to, hits)| {
                if at <= t { ls[to].apply_peer(tag, hits); false } else { true }
            });
            if t >= next_report {
                next_report += period_ms;
                for (i, l) in ls.iter().enumerate() {
                    for (_, hits) in l.peer_report(100).entries {
                        for to in (0..n).filter(|&j| j != i) {
                            flight.push((t + delay_ms, to, hits));
                        }
                    }
                }
            }
            if ask(&ls[p % n], tag) {
                admitted_at.push(t);
            }
        }
        let slack = |w_ms: u64| {
            let w = w_ms as f64 / 1000.0;
            let pd = (period_ms + delay_ms + gap_ms) as f64 / 1000.0;
            let b = f64::from(burst);
            b + 1.0 + rate * w + (n as f64 - 1.0) * (b + 1.0 + rate * pd)
        };
        for (i, &start) in admitted_at.iter().enumerate() {
            for (j, &end) in admitted_at.iter().enumerate().skip(i) {
                let count = (j - i + 1) as f64;
                prop_assert!(count <= slack(end - start), "{count} in {} ms", end - start);
            }
        }
    }
}

/// Issue 21 review: an eviction takes only its own shard's buffer of
/// evicted hits, not a lock of the whole limiter (which every decision of a
/// flood took, under its shard's lock, serializing ATS's threads): a flood
/// on the other shards goes on while one shard's buffer is held.
#[test]
fn evictions_take_only_their_shards_buffer() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let limits = Limits {
        limit: None,
        rate: Some((1.0, 5)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let a: L = Limiter::peered(limits, 4096, 4096, clock.clone());
    let shards = a.keys().map_or(0, |t| t.shards());
    assert_eq!(shards, 4);
    let held = a
        .peered_scope()
        .expect("peered")
        .1
        .evicted_hits
        .buffer(0)
        .lock();
    let (tx, rx) = std::sync::mpsc::channel();
    let flood = a.clone();
    std::thread::spawn(move || {
        let Some(t) = flood.keys() else { return };
        for i in 0..20_000u32 {
            let tag = format!("flood-{i}");
            if t.shard_index(t.hash(tag.as_bytes())) != 0 {
                assert!(ask(&flood, tag.as_bytes()));
            }
        }
        let _ = tx.send(t.evicted());
    });
    let evicted = rx.recv_timeout(Duration::from_secs(10));
    drop(held);
    let evicted = evicted.expect("an eviction waited for another shard's buffer");
    assert!(evicted > 10_000, "{evicted} evicted");
}

/// Only a peered scope takes peers' hits and reports its own: a keyed
/// limiter that is not peered, and a rule limiter, refuse both and keep
/// no tags.
#[test]
fn only_a_peered_scope_exchanges_hits() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let limits = Limits {
        limit: None,
        rate: Some((1.0, 5)),
        queue: 0,
        maxage: None,
        block: None,
        auto: None,
    };
    let keyed: L = Limiter::keyed(limits, 100, clock.clone());
    let rule: L = Limiter::new(limits, clock.clone());
    let key = keyed.keys().map_or(0, |t| t.hash(b"t"));
    assert!(matches!(
        keyed.admit_key_tagged(key, b"t"),
        Admission::Go(_)
    ));
    assert!(matches!(rule.admit_key_tagged(key, b"t"), Admission::Go(_)));
    for l in [&keyed, &rule] {
        assert!(!l.is_peered());
        assert!(!l.apply_peer(b"t", 3), "hits taken by a limiter not peered");
        assert!(l.peer_report(10).entries.is_empty());
    }
    assert!(peered(1.0, 5, &clock).is_peered());
}
