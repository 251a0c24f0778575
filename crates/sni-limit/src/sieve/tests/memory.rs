//! Memory: bounded under any workload, an index that never grows under
//! churn, the bytes an entry costs.

use super::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn memory_stays_bounded(
        buckets in 1u8..=10,
        extra in 0u8..=4,
        perma in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let params = SieveParams {
            buckets,
            size: buckets + extra,
            max_age: Some(1_000),
            perma: perma.then_some(Perma { limit: 20, threshold: buckets / 2, max_age: Some(5_000) }),
        };
        let sieve = Sieve::new(params);
        let full_bytes = sieve.memory_bytes()
            + sieve.shard_sizes().iter().map(|s| s.2 * size_of::<shard::Entry>()).sum::<usize>();
        // A skewed stream: a few heavy keys among many light ones.
        let mut x = seed | 1;
        for t in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = if x % 4 == 0 { x % 64 } else { x };
            let _ = sieve.increment(key, t);
            if x % 97 == 0 {
                let _ = sieve.block(x % 128, t);
            }
            if x % 89 == 0 {
                let _ = sieve.forget(x % 64);
            }
            if t % 16 == 0 {
                index_not_grown(&sieve);
            }
        }
        sieve.check();
        prop_assert!(sieve.len() <= sieve.capacity());
        for &(len, alloc, cap, _, _) in &sieve.shard_sizes() {
            prop_assert!(len <= cap && alloc <= cap);
        }
        prop_assert!(sieve.memory_bytes() <= full_bytes);
    }
}

/// A grown index shows more room than it was reserved with (its room
/// shrinks with tombstones, and is restored by rehashing in place).
fn index_not_grown(s: &Sieve) {
    for (_, _, _, now, reserved) in s.shard_sizes() {
        assert!(now <= reserved, "index grew: {now} > {reserved}");
    }
}

#[test]
fn the_index_never_grows_under_churn() {
    // Every bucket full, then a long stream of new keys through a full shard.
    let s = Sieve::with_shards(
        SieveParams {
            buckets: 2,
            size: 6,
            max_age: None,
            perma: None,
        },
        1,
    );
    for k in 0..200u64 {
        for _ in 0..3 {
            let _ = s.increment(k, 0);
        }
        let _ = s.block(1_000 + k, 0);
    }
    assert_eq!(s.len(), s.capacity());
    for k in 0..200_000u64 {
        let _ = s.increment(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
        index_not_grown(&s);
    }
    s.check();
}

#[test]
fn memory_per_entry() {
    let s = Sieve::new(SieveParams {
        buckets: 10,
        size: 12,
        max_age: None,
        perma: None,
    });
    let empty = s.memory_bytes();
    let full = empty
        + s.shard_sizes()
            .iter()
            .map(|s| s.2 * size_of::<shard::Entry>())
            .sum::<usize>();
    let per_entry = full / s.capacity();
    assert!(
        (70..=80).contains(&per_entry),
        "{per_entry} bytes per entry"
    );
}
