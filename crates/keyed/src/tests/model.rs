//! The model test of eviction: the table against a model of each present
//! key's state, in one shard, in several, and growing.

use super::*;

/// Most consecutive lagging inserts (below) during which one key stays a
/// better choice: the hand moves on by at least `SCAN` keys of main per
/// insert, so it passes every key of the shard within `cap / SCAN` of them;
/// twice that, plus slack, for keys the backward shift moved behind it.
fn max_lag(shard_cap: usize) -> u32 {
    (2 * shard_cap.div_ceil(SCAN) + 2) as u32
}

/// Runs `ops` against the table and a model that knows each present key's
/// state; after each op the table must match the model except for evicted
/// keys, which must be keys of the shard that just inserted that are not
/// busy, and sticky only if no key of the shard was idle; `Full` only if
/// every key of the shard was busy.
///
/// Eviction looks at a bounded number of keys per insert (`evict.rs`), so
/// in a shard of more than `SCAN` keys an insert may *lag*: evict a sticky
/// key while an idle one waits beyond its window, or be refused while a key
/// that is not busy does. Allowed only there, and a key that stays the
/// better choice must be taken within `max_lag` consecutive lagging inserts.
fn run_model(capacity: usize, shards: usize, ops: &[Op]) {
    let t = KeyTable::<T>::with_shards(capacity, shards);
    let mut model: HashMap<u64, T> = HashMap::new();
    let mut evictions = 0u64;
    // Per shard: the keys that were a better choice at each of the latest
    // consecutive lagging inserts, and at how many.
    let mut missed: Vec<HashMap<u64, u32>> = vec![HashMap::new(); t.shards.len()];
    for op in ops {
        let (k, a, insert) = match op {
            Op::With(k, a) => (key(*k), a, true),
            Op::Get(k, a) => (key(*k), a, false),
        };
        let si = t.shard_index(k);
        let in_shard: Vec<&T> = model
            .iter()
            .filter(|(mk, _)| t.shard_index(**mk) == si)
            .map(|(_, s)| s)
            .collect();
        let shard_full = in_shard.len() == shard_cap(&t, si);
        let keys_where = |p: fn(&T) -> bool| -> Vec<u64> {
            model
                .iter()
                .filter(|(mk, s)| t.shard_index(**mk) == si && p(s))
                .map(|(mk, _)| *mk)
                .collect()
        };
        let idle = keys_where(|s| !s.busy && !s.sticky);
        let free = keys_where(|s| !s.busy);
        // An exact window: every key of the shard looked at.
        let exact = in_shard.len() <= SCAN;
        let before = model.get(&k).cloned();
        let mut seen = None;
        let r = if insert {
            t.with(k, |s| {
                seen = Some(s.clone());
                apply(s, a);
            })
            .map(Some)
        } else {
            Ok(t.get(k, |s| {
                seen = Some(s.clone());
                apply(s, a);
            }))
        };
        let mut lag_over: Option<&[u64]> = None;
        match (&before, r) {
            (Some(b), Ok(Some(()))) => assert_eq!(seen.as_ref(), Some(b), "kept state"),
            (Some(_), _) => panic!("a present key was not found"),
            (None, Ok(Some(()))) => {
                assert!(insert, "get inserted a key");
                assert_eq!(seen, Some(T::default()), "new key, default state");
            }
            (None, Ok(None)) => assert!(!insert),
            (None, Err(Full)) => {
                assert!(shard_full, "Full below the bound");
                // Whatever the window: a shard with no busy key makes room.
                assert!(free.len() < in_shard.len(), "Full and no key busy");
                if !free.is_empty() {
                    assert!(!exact, "Full while a key could go");
                    lag_over = Some(&free);
                }
                assert!(seen.is_none());
            }
        }
        if let Some(mut s) = seen {
            apply(&mut s, a);
            model.insert(k, s);
        }
        let actual = contents(&t);
        let gone: Vec<u64> = model
            .keys()
            .filter(|mk| !actual.contains_key(mk))
            .copied()
            .collect();
        assert!(gone.len() <= 1, "one insert evicts at most one key");
        for g in gone {
            let s = &model[&g];
            assert!(!s.busy, "a busy key was evicted");
            if s.sticky && !idle.is_empty() {
                assert!(!exact, "sticky evicted before idle");
                lag_over = Some(&idle);
            }
            assert!(insert && before.is_none(), "evicted without an insert");
            assert_eq!(t.shard_index(g), si, "evicted from another shard");
            assert!(shard_full, "evicted below the bound");
            model.remove(&g);
            evictions += 1;
        }
        if insert && before.is_none() && shard_full {
            let mut next = HashMap::new();
            for k in lag_over.unwrap_or_default() {
                let n = missed[si].get(k).copied().unwrap_or(0) + 1;
                assert!(
                    n <= max_lag(shard_cap(&t, si)),
                    "a key that could go was passed over by {n} inserts in a row"
                );
                next.insert(*k, n);
            }
            missed[si] = next;
        }
        assert_eq!(actual, model);
        assert!(t.len() <= capacity);
        assert_eq!(t.len(), model.len());
        assert_eq!(t.evicted(), evictions);
        check_shards(&t);
    }
}

/// `busy` weighs marking a key busy against 2 for releasing it: high
/// values fill shards with busy keys (the `Full` and all-but-one-busy paths).
fn op(keys: u16, busy: u32) -> impl Strategy<Value = Op> {
    let act = prop_oneof![
        4 => Just(Act::Touch),
        2 => any::<u32>().prop_map(Act::Mark),
        busy => Just(Act::Busy(true)),
        2 => Just(Act::Busy(false)),
        busy => Just(Act::Sticky(true)),
        2 => Just(Act::Sticky(false)),
    ];
    (0..keys, act, 0..4u8).prop_map(|(k, a, w)| {
        if w == 0 {
            Op::Get(k, a)
        } else {
            Op::With(k, a)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn model_one_shard(
        (cap, ops) in (1usize..=12, 1u32..=6).prop_flat_map(|(cap, busy)| {
            (Just(cap), proptest::collection::vec(op((3 * cap + 2) as u16, busy), 1..300))
        })
    ) {
        run_model(cap, 1, &ops);
    }

    #[test]
    fn model_shards(
        (cap, shards, ops) in (2usize..=40, 2usize..=5, 1u32..=6).prop_flat_map(|(cap, shards, busy)| {
            (Just(cap), Just(shards), proptest::collection::vec(op((3 * cap + 2) as u16, busy), 1..400))
        })
    ) {
        run_model(cap, shards, &ops);
    }

    /// Larger shards: growth of the cell array, probation at 10 % of a shard.
    #[test]
    fn model_growth(
        (busy, ops) in (1u32..=8).prop_flat_map(|busy| {
            (Just(busy), proptest::collection::vec(op(400, busy), 1..1500))
        })
    ) {
        let _ = busy;
        run_model(150, 2, &ops);
    }
}
