use super::*;
use proptest::prelude::*;

/// N=2, S=2, one shard: bucket 1 holds 2, bucket 2 (entry) 4, block 4.
fn small(max_age: Option<u64>, perma: Option<Perma>) -> Sieve {
    Sieve::with_shards(
        SieveParams {
            buckets: 2,
            size: 2,
            max_age,
            perma,
        },
        1,
    )
}

fn hit(bucket: u8, count: u32) -> Hit {
    Hit { bucket, count }
}

/// The one shard's buckets, most recent first.
fn buckets(s: &Sieve) -> Vec<Vec<(u64, u32)>> {
    s.check();
    s.dump().remove(0)
}

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

/// The reference: one Vec per bucket, most recent first, linear search.
struct Model {
    params: SieveParams,
    caps: Vec<usize>,
    buckets: Vec<Vec<(u64, u32, u64)>>,
}

impl Model {
    fn new(params: SieveParams) -> Model {
        let params = params.normalized();
        let caps = (0..=params.buckets)
            .map(|b| params.bucket_size(b))
            .collect();
        Model {
            params,
            caps,
            buckets: vec![Vec::new(); usize::from(params.buckets) + 1],
        }
    }

    fn take(&mut self, key: u64) -> Option<(usize, (u64, u32, u64))> {
        for (b, list) in self.buckets.iter_mut().enumerate() {
            if let Some(i) = list.iter().position(|e| e.0 == key) {
                return Some((b, list.remove(i)));
            }
        }
        None
    }

    fn make_room(&mut self, b: usize) {
        if self.buckets[b].len() >= self.caps[b] {
            self.buckets[b].pop();
        }
    }

    fn increment(&mut self, key: u64, now: u64) -> Hit {
        let n = usize::from(self.params.buckets);
        let at = match self.take(key) {
            None => {
                self.make_room(n);
                self.buckets[n].insert(0, (key, 1, now));
                n
            }
            Some((b, mut e)) => {
                let max_age = if b == 0 {
                    self.params.perma.and_then(|p| p.max_age)
                } else {
                    self.params.max_age
                };
                if max_age.is_some_and(|a| now - e.2 > a) {
                    e.1 >>= 3;
                    e.2 = now;
                    self.make_room(n);
                    self.buckets[n].insert(0, e);
                    n
                } else {
                    e.1 = e.1.saturating_add(1);
                    if b >= 2 {
                        let up = b - 1;
                        if self.buckets[up].len() < self.caps[up] {
                            self.buckets[up].insert(0, e);
                            up
                        } else if self.buckets[up].last().is_some_and(|t| t.1 <= e.1) {
                            let t = self.buckets[up].pop().unwrap();
                            self.buckets[up].insert(0, e);
                            self.buckets[b].insert(0, t);
                            up
                        } else {
                            self.buckets[b].insert(0, e);
                            b
                        }
                    } else {
                        self.buckets[b].insert(0, e);
                        b
                    }
                }
            }
        };
        let e = self.buckets[at][0];
        if let Some(p) = self.params.perma {
            if e.1 > p.limit && at >= 1 && at <= usize::from(p.threshold) {
                self.buckets[at].remove(0);
                self.make_room(0);
                self.buckets[0].insert(0, (key, e.1, now));
                return hit(0, e.1);
            }
        }
        hit(at as u8, e.1)
    }

    fn lookup(&self, key: u64) -> Option<Hit> {
        self.buckets
            .iter()
            .enumerate()
            .find_map(|(b, list)| list.iter().find(|e| e.0 == key).map(|e| hit(b as u8, e.1)))
    }

    fn block(&mut self, key: u64, now: u64) -> Hit {
        let count = self.take(key).map_or(0, |(_, e)| e.1);
        self.make_room(0);
        self.buckets[0].insert(0, (key, count, now));
        hit(0, count)
    }

    fn forget(&mut self, key: u64) -> bool {
        self.take(key).is_some()
    }

    fn dump(&self) -> Vec<Vec<(u64, u32)>> {
        self.buckets
            .iter()
            .map(|l| l.iter().map(|e| (e.0, e.1)).collect())
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Increment(u64),
    Lookup(u64),
    Block(u64),
    Forget(u64),
}

fn params_strategy() -> impl Strategy<Value = SieveParams> {
    (1u8..=4, 0u8..=1).prop_flat_map(|(buckets, extra)| {
        let perma = (0u32..=12, 0..=buckets + 1, proptest::option::of(1u64..=60)).prop_map(
            |(limit, threshold, max_age)| Perma {
                limit,
                threshold,
                max_age,
            },
        );
        (proptest::option::of(1u64..=60), proptest::option::of(perma)).prop_map(
            move |(max_age, perma)| SieveParams {
                buckets,
                size: buckets + extra,
                max_age,
                perma,
            },
        )
    })
}

fn ops_strategy() -> impl Strategy<Value = Vec<(Op, u64)>> {
    let key = 0u64..40;
    let op = prop_oneof![
        12 => key.clone().prop_map(Op::Increment),
        2 => key.clone().prop_map(Op::Lookup),
        1 => key.clone().prop_map(Op::Block),
        1 => key.prop_map(Op::Forget),
    ];
    proptest::collection::vec((op, 0u64..=8), 0..600)
}

proptest! {
    #[test]
    fn matches_the_model(params in params_strategy(), ops in ops_strategy()) {
        let sieve = Sieve::with_shards(params, 1);
        let mut model = Model::new(params);
        let mut now = 0;
        for (op, step) in ops {
            now += step;
            match op {
                Op::Increment(k) => prop_assert_eq!(sieve.increment(k, now), model.increment(k, now)),
                Op::Lookup(k) => prop_assert_eq!(sieve.lookup(k), model.lookup(k)),
                Op::Block(k) => prop_assert_eq!(sieve.block(k, now), model.block(k, now)),
                Op::Forget(k) => prop_assert_eq!(sieve.forget(k), model.forget(k)),
            }
            sieve.check();
            prop_assert_eq!(&sieve.dump()[0], &model.dump());
        }
        prop_assert_eq!(sieve.len(), model.buckets.iter().map(Vec::len).sum::<usize>());
    }
}

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
