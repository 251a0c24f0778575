//! Keys moving through the buckets: entry, promotion, swaps with a lighter
//! tail, aging, blocks (perma too), forget; pressure, shards, a heavy key
//! rising.

use super::*;

#[test]
fn new_key_enters_the_entry_bucket() {
    let s = small(None, None);
    assert!(s.is_empty());
    assert_eq!(s.lookup(7), None);
    assert_eq!(s.increment(7, 0), hit(2, 1));
    assert_eq!(s.lookup(7), Some(hit(2, 1)));
    assert_eq!(s.increment(8, 0), hit(2, 1));
    assert_eq!(s.len(), 2);
    assert_eq!(buckets(&s), vec![vec![], vec![], vec![(8, 1), (7, 1)]]);
}

#[test]
fn hits_promote_one_bucket_at_a_time() {
    let s = Sieve::with_shards(
        SieveParams {
            buckets: 3,
            size: 4,
            max_age: None,
            perma: None,
        },
        1,
    );
    assert_eq!(s.increment(1, 0), hit(3, 1));
    assert_eq!(s.increment(1, 0), hit(2, 2));
    assert_eq!(s.increment(1, 0), hit(1, 3));
    assert_eq!(s.increment(1, 0), hit(1, 4));
    assert_eq!(s.lookup(1), Some(hit(1, 4)));
}

#[test]
fn full_bucket_swaps_with_a_lighter_tail_only() {
    let s = small(None, None);
    for k in [1, 2] {
        let _ = s.increment(k, 0);
        assert_eq!(s.increment(k, 0), hit(1, 2));
    }
    assert_eq!(buckets(&s)[1], vec![(2, 2), (1, 2)]);
    // Bucket 1 is full; its tail (1, 2 hits) has no more than 3's 2: swap.
    let _ = s.increment(3, 0);
    assert_eq!(s.increment(3, 0), hit(1, 2));
    assert_eq!(
        buckets(&s),
        vec![vec![], vec![(3, 2), (2, 2)], vec![(1, 2)]]
    );
    // Make the tail heavier than the next climber: no swap.
    assert_eq!(s.increment(2, 0), hit(1, 3));
    assert_eq!(s.increment(3, 0), hit(1, 3));
    let _ = s.increment(4, 0);
    assert_eq!(s.increment(4, 0), hit(2, 2));
    assert_eq!(
        buckets(&s),
        vec![vec![], vec![(3, 3), (2, 3)], vec![(4, 2), (1, 2)]]
    );
    // Bucket 1 only reorders.
    assert_eq!(s.increment(2, 0), hit(1, 4));
    assert_eq!(buckets(&s)[1], vec![(2, 4), (3, 3)]);
}

#[test]
fn full_entry_bucket_forgets_its_least_recent() {
    let s = small(None, None);
    for k in 1..=4 {
        let _ = s.increment(k, 0);
    }
    let _ = s.increment(1, 0); // 1 moves up: room for one more.
    let _ = s.increment(5, 0);
    assert_eq!(s.len(), 5);
    let _ = s.increment(6, 0);
    assert_eq!(s.lookup(2), None);
    assert_eq!(s.len(), 5);
    assert_eq!(buckets(&s)[2], vec![(6, 1), (5, 1), (4, 1), (3, 1)]);
}

#[test]
fn old_entries_age_on_their_next_hit() {
    let s = small(Some(100), None);
    for _ in 0..16 {
        let _ = s.increment(1, 0);
    }
    assert_eq!(s.lookup(1), Some(hit(1, 16)));
    // Exactly max_age is not older than it.
    assert_eq!(s.increment(1, 100), hit(1, 17));
    assert_eq!(s.increment(1, 201), hit(2, 2));
    // The age restarted at 201.
    assert_eq!(s.increment(1, 250), hit(1, 3));
    assert_eq!(s.increment(1, 301), hit(1, 4));
    assert_eq!(s.increment(1, 302), hit(2, 0));

    let never = small(None, None);
    for t in 0..16 {
        let _ = never.increment(1, t * 1_000_000_000);
    }
    assert_eq!(never.lookup(1), Some(hit(1, 16)));
}

#[test]
fn aging_into_a_full_entry_bucket_forgets_its_least_recent() {
    let s = small(Some(100), None);
    let _ = s.increment(1, 0);
    let _ = s.increment(1, 0);
    for k in 2..=5 {
        let _ = s.increment(k, 50);
    }
    assert_eq!(s.increment(1, 101), hit(2, 0));
    assert_eq!(s.lookup(2), None);
    assert_eq!(buckets(&s)[2], vec![(1, 0), (5, 1), (4, 1), (3, 1)]);
}

#[test]
fn perma_block_and_its_aging() {
    let perma = Perma {
        limit: 5,
        threshold: 1,
        max_age: Some(1000),
    };
    let s = small(Some(1_000_000), Some(perma));
    assert_eq!(s.increment(1, 0), hit(2, 1));
    for c in 2..=5 {
        assert_eq!(s.increment(1, 0), hit(1, c));
    }
    assert_eq!(s.increment(1, 10), hit(0, 6));
    assert_eq!(s.increment(1, 20), hit(0, 7));
    assert_eq!(buckets(&s)[0], vec![(1, 7)]);
    // Blocked at 10: aged after 1010, whatever hits came since.
    assert_eq!(s.increment(1, 1010), hit(0, 8));
    assert_eq!(s.increment(1, 1011), hit(2, 1));
    assert_eq!(buckets(&s), vec![vec![], vec![], vec![(1, 1)]]);

    // A key above the limit but not hot enough is not blocked.
    let s = small(
        None,
        Some(Perma {
            threshold: 0,
            ..perma
        }),
    );
    for _ in 0..10 {
        let _ = s.increment(1, 0);
    }
    assert_eq!(s.lookup(1), Some(hit(1, 10)));

    // No rule: never blocked.
    let s = small(None, None);
    for _ in 0..1000 {
        let _ = s.increment(1, 0);
    }
    assert_eq!(s.lookup(1), Some(hit(1, 1000)));

    // Limit 0, threshold N: even a new key.
    let s = small(
        None,
        Some(Perma {
            limit: 0,
            threshold: 2,
            max_age: None,
        }),
    );
    assert_eq!(s.increment(1, 0), hit(0, 1));
    assert_eq!(s.increment(1, u64::MAX), hit(0, 2));
}

#[test]
fn perma_block_into_a_full_block_bucket_forgets_its_least_recent() {
    let s = small(
        None,
        Some(Perma {
            limit: 0,
            threshold: 2,
            max_age: None,
        }),
    );
    for k in 1..=5 {
        assert_eq!(s.increment(k, 0), hit(0, 1));
    }
    assert_eq!(s.lookup(1), None);
    assert_eq!(buckets(&s)[0], vec![(5, 1), (4, 1), (3, 1), (2, 1)]);
}

#[test]
fn block_moves_or_inserts_into_the_block_bucket() {
    let s = small(None, None);
    assert_eq!(s.block(1, 0), hit(0, 0));
    let _ = s.increment(2, 0);
    let _ = s.increment(2, 0);
    assert_eq!(s.block(2, 5), hit(0, 2));
    assert_eq!(buckets(&s), vec![vec![(2, 2), (1, 0)], vec![], vec![]]);
    // Hits of a blocked key keep it blocked; block() counts none.
    assert_eq!(s.increment(1, 6), hit(0, 1));
    assert_eq!(s.block(2, 7), hit(0, 2));
    assert_eq!(buckets(&s)[0], vec![(2, 2), (1, 1)]);
    for k in 3..=5 {
        let _ = s.block(k, 8);
    }
    assert_eq!(s.lookup(1), None);
    assert_eq!(buckets(&s)[0], vec![(5, 0), (4, 0), (3, 0), (2, 2)]);
    // Without a perma rule, blocked keys never age.
    assert_eq!(s.increment(2, u64::MAX), hit(0, 3));
}

#[test]
fn forget_frees_the_slot() {
    let s = small(None, None);
    let _ = s.increment(1, 0);
    let _ = s.increment(2, 0);
    assert!(s.forget(1));
    assert!(!s.forget(1));
    assert_eq!(s.lookup(1), None);
    assert_eq!(s.len(), 1);
    let _ = s.increment(3, 0);
    assert_eq!(s.shard_sizes()[0].0, 2);
    assert_eq!(buckets(&s)[2], vec![(3, 1), (2, 1)]);
}

#[test]
fn pressure_table() {
    // (active, limit, percentage, buckets) -> pressure
    let table: &[(u32, u32, u8, u8, Option<u8>)] = &[
        (0, 0, 90, 10, None),
        (5, 0, 0, 10, None),
        (0, 1000, 90, 10, None),
        (899, 1000, 90, 10, None),
        (900, 1000, 90, 10, Some(0)),
        (909, 1000, 90, 10, Some(0)),
        (910, 1000, 90, 10, Some(1)),
        (990, 1000, 90, 10, Some(9)),
        (1000, 1000, 90, 10, Some(10)),
        (5000, 1000, 90, 10, Some(10)),
        (u32::MAX, 1, 90, 99, Some(99)),
        (0, 10, 0, 10, Some(0)),
        (5, 10, 0, 10, Some(5)),
        (10, 10, 0, 10, Some(10)),
        (98, 100, 99, 10, None),
        (99, 100, 99, 10, Some(0)),
        (100, 100, 99, 10, Some(10)),
        // Above 99 is taken as 99 (no division by zero).
        (100, 100, 100, 10, Some(10)),
        (99, 100, 200, 10, Some(0)),
        (1, 1, 0, 0, Some(0)),
    ];
    for &(active, limit, percentage, buckets, want) in table {
        assert_eq!(
            pressure(active, limit, percentage, buckets),
            want,
            "{active}/{limit} at {percentage}% over {buckets}"
        );
    }
}

#[test]
fn refused_when_pressure_exceeds_the_bucket() {
    assert!(!refused(None, hit(0, 1)));
    assert!(!refused(Some(0), hit(0, 1)));
    assert!(refused(Some(1), hit(0, 1)));
    assert!(!refused(Some(1), hit(1, 1)));
    assert!(refused(Some(10), hit(9, 1)));
    assert!(!refused(Some(10), hit(10, 1)));
}

#[test]
fn shards_keep_two_entries_per_bucket() {
    let params = |buckets, size| SieveParams {
        buckets,
        size,
        max_age: None,
        perma: None,
    };
    for (b, s, shards) in [(10, 12, 4), (10, 10, 1), (3, 9, 16), (1, 1, 1), (8, 8, 1)] {
        let sieve = Sieve::new(params(b, s));
        assert_eq!(sieve.shards.len(), shards, "N={b} S={s}");
        for shard in sieve.shards.iter() {
            assert!(shard.lock().bucket_caps().iter().all(|&c| c >= 2));
        }
    }
    // Out of range parameters are kept sane rather than trusted.
    let big = params(99, 0).normalized();
    assert_eq!((big.buckets, big.size), (20, 20));
    assert_eq!(params(3, 30).normalized().size, 20);
    let sieve = Sieve::new(params(0, 0));
    assert_eq!((sieve.params().buckets, sieve.params().size), (1, 1));
    assert_eq!(sieve.capacity(), 2 + 2);
}

#[test]
fn a_heavy_key_rises_above_light_ones() {
    let s = Sieve::new(SieveParams {
        buckets: 10,
        size: 12,
        max_age: None,
        perma: None,
    });
    let key = |i: u64| i.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x5555;
    let heavy = key(1_000_000);
    for i in 0..1000 {
        let _ = s.increment(key(i), i);
        if i % 10 == 0 {
            let _ = s.increment(heavy, i);
        }
    }
    assert_eq!(s.lookup(heavy), Some(hit(1, 100)));
    for i in 0..1000 {
        if let Some(h) = s.lookup(key(i)) {
            assert_eq!(h, hit(10, 1));
        }
    }
    s.check();
}
