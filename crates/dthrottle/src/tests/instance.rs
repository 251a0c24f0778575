//! One instance's buckets and reports: the seed's worked example, what a
//! report carries, long tags, a full table and its evicted tags' hits.

use super::*;

/// The seed's worked example, row by row: two instances A and B, burst 10,
/// rate 1/s, reports every 5 s. The seed rounds to whole tokens and ignores
/// the refill during the first 0.2 s; "within rounding" is 0.25 tokens.
#[test]
fn seed_worked_example() {
    let clock = Arc::new(ManualClock::new(T0));
    let (a, b) = (node(&clock, config(10, 1.0)), node(&clock, config(10, 1.0)));
    let c: &[u8] = b"C";
    // Other clients in A's report: they must not disturb C.
    clock.set(at(0.05));
    for (tag, n) in [
        (&b"204.112.101.1"[..], 2),
        (b"212.132.96.2", 4),
        (b"196.44.2.71", 1),
    ] {
        for _ in 0..n {
            assert_eq!(a.decide(tag), Decision::Ok);
        }
    }
    // t=0: both full.
    assert_level(&a, c, 10.0, 0.0, "t=0 A");
    assert_level(&b, c, 10.0, 0.0, "t=0 B");
    // t=0.1: 17 requests, 9 to A and 8 to B, all served.
    clock.set(at(0.1));
    for i in 0..17 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_eq!(node.decide(c), Decision::Ok, "request {}", i + 1);
    }
    assert_level(&a, c, 1.0, 0.25, "t=0.1 A");
    assert_level(&b, c, 2.0, 0.25, "t=0.1 B");
    // t=0.2: two more to A; the second (the 19th) is refused.
    clock.set(at(0.2));
    assert_eq!(a.decide(c), Decision::Ok, "18th request");
    assert_eq!(a.decide(c), Decision::No, "19th request");
    assert_level(&a, c, 0.0, 0.25, "t=0.2 A");
    assert_level(&b, c, 2.0, 0.25, "t=0.2 B");
    // t=5: the reports. A served C 10 times, B 8 times.
    clock.set(at(5.0));
    let (ra, rb) = (a.report(), b.report());
    assert_eq!(hits_of(&ra, c), 10);
    assert_eq!(hits_of(&rb, c), 8);
    assert_eq!(hits_of(&ra, b"212.132.96.2"), 4);
    assert_eq!(ra.entries[0], (Box::from(c), 10), "heaviest first");
    assert_eq!(ra.entries.len(), 4);
    // t=5.1: each has applied the other's report: -8+5 on both.
    clock.set(at(5.1));
    for (tag, hits) in &ra.entries {
        assert!(b.apply_peer(tag, *hits));
    }
    for (tag, hits) in &rb.entries {
        assert!(a.apply_peer(tag, *hits));
    }
    assert_level(&a, c, -3.0, 0.25, "t=5.1 A");
    assert_level(&b, c, -3.0, 0.25, "t=5.1 B");
    // t=5.2: two more requests, both refused.
    clock.set(at(5.2));
    assert_eq!(a.decide(c), Decision::No);
    assert_eq!(b.decide(c), Decision::No);
    assert_level(&a, c, -3.0, 0.25, "t=5.2 A");
    assert_level(&b, c, -3.0, 0.25, "t=5.2 B");
    // t=6..9: the buckets refill at 1/s.
    for (t, want) in [(6.0, -2.0), (7.0, -1.0), (8.0, 0.0), (9.0, 1.0)] {
        clock.set(at(t));
        assert_level(&a, c, want, 0.25, &format!("t={t} A"));
        assert_level(&b, c, want, 0.25, &format!("t={t} B"));
    }
    // C's next request is admitted at t ≈ 9 s (exactly 9.1 here, as the
    // seed's rounding skips the 0.1 s refill before the burst).
    clock.set(at(8.9));
    assert_eq!(a.decide(c), Decision::No);
    assert_eq!(b.decide(c), Decision::No);
    clock.set(at(9.1));
    assert_eq!(a.decide(c), Decision::Ok);
    assert_eq!(b.decide(c), Decision::Ok);
    // The refusals were not reported as hits; the two admissions were.
    clock.set(at(10.0));
    assert_eq!(a.report().entries, vec![(Box::from(c), 1)]);
}

#[test]
fn report_keeps_the_heaviest_and_counts_the_rest() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(1000, 1.0);
    c.max_report_tags = 2;
    let b = node(&clock, c);
    for (tag, n) in [(&b"a"[..], 3), (b"b", 5), (b"c", 1), (b"d", 4)] {
        for _ in 0..n {
            assert_eq!(b.decide(tag), Decision::Ok);
        }
    }
    let r = b.report();
    assert_eq!(
        r.entries,
        vec![(Box::from(&b"b"[..]), 5), (Box::from(&b"d"[..]), 4)]
    );
    assert_eq!((r.dropped_tags, r.dropped_hits), (2, 4));
    assert_eq!(b.stats().report_dropped_tags, 2);
    // Everything was reset, dropped or not.
    assert_eq!(b.report(), Report::default());
}

#[test]
fn peer_hits_are_not_reported_again() {
    let clock = Arc::new(ManualClock::new(T0));
    let b = node(&clock, config(5, 1.0));
    assert!(b.apply_peer(b"x", 3));
    assert_eq!(b.report(), Report::default());
    assert_eq!(b.stats().peer_hits_applied, 3);
    // 5 - 3 = 2 tokens left locally.
    assert_eq!(b.decide(b"x"), Decision::Ok);
    assert_eq!(b.decide(b"x"), Decision::Ok);
    assert_eq!(b.decide(b"x"), Decision::No);
}

#[test]
fn long_tags_become_a_digest_every_instance_agrees_on() {
    let long = vec![b'x'; 300];
    let d = long_tag(&long);
    assert_eq!(d.len(), 71);
    assert!(d.starts_with(b"sha256:"));
    assert_eq!(long_tag(&long), d);
    assert_eq!(&*long_tag(b"short"), b"short");
    let clock = Arc::new(ManualClock::new(T0));
    let b = node(&clock, config(5, 1.0));
    assert_eq!(b.decide(&long), Decision::Ok);
    assert_eq!(b.report().entries, vec![(Box::from(&*d), 1)]);
}

/// Issue 21: tags with unreported hits make room for new ones (their hits
/// go to the next report), tags in debt only when no tag is idle.
#[test]
fn a_full_table_makes_room_and_debt_yields_last() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(2, 1.0);
    c.max_tags = 2;
    let b = node(&clock, c);
    assert_eq!(b.decide(b"a"), Decision::Ok);
    assert_eq!(b.decide(b"b"), Decision::Ok);
    // Both have unreported hits: one makes room, its hit is carried.
    assert_eq!(b.decide(b"c"), Decision::Ok);
    assert!(b.apply_peer(b"d", 1));
    assert_eq!(b.stats().tags, 2);
    let r = b.report();
    assert_eq!(
        (hits_of(&r, b"a"), hits_of(&r, b"b"), hits_of(&r, b"c")),
        (1, 1, 1)
    );
    assert_eq!(r.dropped_tags, 0);
    // A tag in debt stays while an idle tag can go.
    assert!(b.apply_peer(b"c", 10));
    assert_eq!(b.decide(b"e"), Decision::Ok);
    assert!(b.level(b"c").is_some_and(|l| l <= -8.0));
    assert_eq!(b.decide(b"f"), Decision::Ok);
    assert!(
        b.level(b"c").is_some(),
        "the tag in debt was evicted before an idle tag"
    );
    // Both in debt: one goes rather than refuse a new tag.
    assert!(b.apply_peer(b"f", 10));
    assert_eq!(b.decide(b"g"), Decision::Ok);
    assert_eq!(b.stats().tags, 2);
    assert_eq!(b.stats().full, 0);
    assert_eq!(b.stats().evicted_hits_dropped, 0);
}

/// Issue 21: 2x max_tags distinct tags within one period, then a new tag is
/// served, and every hit of the flood reaches the next report (the evicted
/// tags' buffer holds max_report_tags, here enough for all of them).
#[test]
fn a_flood_of_one_off_tags_locks_nobody_out_and_loses_no_hit() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(5, 1.0);
    c.max_tags = 1000;
    c.max_report_tags = 5000;
    let b = node(&clock, c);
    for i in 0..2000u32 {
        assert_eq!(b.decide(format!("flood-{i}").as_bytes()), Decision::Ok);
    }
    assert_eq!(b.decide(b"honest"), Decision::Ok);
    assert_eq!(b.stats().full, 0);
    let r = b.report();
    let sent: u64 = r.entries.iter().map(|e| u64::from(e.1)).sum();
    assert_eq!((sent, r.entries.len(), r.dropped_tags), (2001, 2001, 0));
    assert_eq!(hits_of(&r, b"honest"), 1);
    assert!(b.report().entries.is_empty(), "each hit reported once");
}

/// The buffer of evicted tags' hits is bounded (max_report_tags): beyond
/// it the lightest are dropped and counted.
#[test]
fn evicted_hits_beyond_the_bound_are_counted() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(5, 1.0);
    c.max_tags = 100;
    c.max_report_tags = 100;
    let b = node(&clock, c);
    for i in 0..400u32 {
        b.decide(format!("flood-{i}").as_bytes());
    }
    let r = b.report();
    let sent: u64 = r.entries.iter().map(|e| u64::from(e.1)).sum();
    assert_eq!(r.entries.len(), 100);
    // 300 evicted, 100 of them carried (200 dropped); the table's 100
    // compete with those for the report's 100 places. Every hit is sent
    // or counted.
    assert_eq!(sent + r.dropped_hits, 400);
    assert_eq!(r.dropped_tags, 300);
    assert_eq!(b.stats().evicted_hits_dropped, 200);
    assert_eq!(b.stats().report_dropped_tags, 300);
}

/// One authentic report with an absurd count cannot lock a tag out beyond
/// a day: the daemon caps debt as the plugin does (the same
/// `debt::apply_hits`), and a tag in debt yields its place to a new tag.
#[test]
fn a_huge_report_is_capped_at_a_day_of_debt() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(2, 1.0);
    c.max_tags = 1;
    let b = node(&clock, c);
    assert!(b.apply_peer(b"x", u32::MAX));
    assert!(b.apply_peer(b"x", u32::MAX));
    let level = b.level(b"x").unwrap_or(0.0);
    assert!((level + 86_400.0).abs() < 1e-6, "level {level}");
    assert_eq!(b.decide(b"x"), Decision::No);
    clock.advance(std::time::Duration::from_secs(86_399));
    assert_eq!(b.decide(b"x"), Decision::No, "still in debt");
    clock.advance(std::time::Duration::from_secs(2));
    assert_eq!(b.decide(b"x"), Decision::Ok, "a day later x is paid up");
    assert!(b.apply_peer(b"x", u32::MAX));
    assert_eq!(
        b.decide(b"y"),
        Decision::Ok,
        "x in debt yields the only place"
    );
    assert!(b.level(b"x").is_none());
}

/// Hits served while a report is being made are kept for the next one.
#[test]
fn hits_served_during_a_report_are_not_lost() {
    let clock = Arc::new(ManualClock::new(T0));
    let b = Arc::new(node(&clock, config(1_000_000, 1.0)));
    let served = std::thread::scope(|s| {
        let w = s.spawn(|| {
            (0..20_000)
                .filter(|_| b.decide(b"t") == Decision::Ok)
                .count()
        });
        let mut reported = 0u64;
        while !w.is_finished() {
            reported += b
                .report()
                .entries
                .iter()
                .map(|e| u64::from(e.1))
                .sum::<u64>();
        }
        let served = w.join().unwrap_or(0) as u64;
        reported += b
            .report()
            .entries
            .iter()
            .map(|e| u64::from(e.1))
            .sum::<u64>();
        assert_eq!(reported, served);
        served
    });
    assert_eq!(served, 20_000);
}

/// Issue 21 review: an eviction takes only its own shard's buffer of
/// evicted hits, not a lock of the whole limiter (which every decision of a
/// flood took, under its shard's lock, serializing the threads): a flood on
/// the other shards goes on while one shard's buffer is held.
#[test]
fn evictions_take_only_their_shards_buffer() {
    let clock = Arc::new(ManualClock::new(T0));
    let mut c = config(5, 1.0);
    c.max_tags = 4096;
    c.max_report_tags = 4096;
    let b = Arc::new(node(&clock, c));
    assert_eq!(b.table.shards(), 4);
    let held = b.evicted.buffer(0).lock();
    let (tx, rx) = std::sync::mpsc::channel();
    let flood = b.clone();
    std::thread::spawn(move || {
        for i in 0..20_000u32 {
            let tag = format!("flood-{i}");
            if flood.table.shard_index(flood.table.hash(tag.as_bytes())) != 0 {
                assert_eq!(flood.decide(tag.as_bytes()), Decision::Ok);
            }
        }
        let _ = tx.send(flood.table.evicted());
    });
    let evicted = rx.recv_timeout(std::time::Duration::from_secs(10));
    drop(held);
    let evicted = evicted.expect("an eviction waited for another shard's buffer");
    assert!(evicted > 10_000, "{evicted} evicted");
    let r = b.report();
    let sent: u64 = r.entries.iter().map(|e| u64::from(e.1)).sum();
    assert_eq!(sent + r.dropped_hits, b.table.len() as u64 + evicted);
}
