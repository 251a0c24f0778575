//! The table through its public API: scan resistance, small capacities,
//! per-table hash keys, threads.

use std::sync::Arc;

use keyed::{Full, KeyState, KeyTable};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct St {
    /// Non-zero once written: a kept state, not a reset one.
    mark: u64,
    busy: bool,
}

impl KeyState for St {
    fn busy(&self, _now: u64) -> bool {
        self.busy
    }
}

/// Distinct, hash-like keys without a table's seed: `n` -> a spread u64.
fn key(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `active` clients seen three times each, then a flood of one-off keys of
/// 10x the capacity (with the clients coming back during it every
/// `revisit` flood keys, or not at all if 0): every client keeps its state.
fn flood(capacity: usize, active: u64, revisit: u64) {
    let t = KeyTable::<St>::new(capacity);
    for _ in 0..3 {
        for a in 0..active {
            t.with(key(a), |s| s.mark = a + 1).unwrap();
        }
    }
    let flood = 10 * capacity as u64;
    let mut next = 0;
    for i in 0..flood {
        t.with(key(1 << 40 | i), |_| ()).unwrap();
        if revisit != 0 && i % revisit == 0 {
            t.with(key(next), |s| assert!(s.mark == 0 || s.mark == next + 1))
                .unwrap();
            next = (next + 1) % active;
        }
        assert!(t.len() <= capacity);
    }
    let lost = (0..active)
        .filter(|&a| t.get(key(a), |s| s.mark) != Some(a + 1))
        .count();
    assert_eq!(
        lost, 0,
        "{lost} of {active} active clients lost their state"
    );
    assert_eq!(t.len(), capacity);
    assert!(t.evicted() >= flood - capacity as u64);
}

#[test]
fn one_off_flood_keeps_active_clients_one_shard() {
    flood(1000, 100, 0);
    flood(1000, 500, 0);
    flood(1000, 100, 10);
}

#[test]
fn one_off_flood_keeps_active_clients_sharded() {
    // 64 shards of ~1 560 keys.
    flood(100_000, 10_000, 0);
    flood(100_000, 10_000, 7);
}

/// For contrast: a client seen once during a flood is a one-off key too.
/// (Keys that arrived while the table was filling stay until returning
/// clients need their room: main is swept only when probation is short.)
#[test]
fn a_key_seen_once_is_not_protected() {
    let t = KeyTable::<St>::new(1000);
    for i in 1..=2000 {
        t.with(key(i), |_| ()).unwrap();
    }
    t.with(key(0), |s| s.mark = 1).unwrap();
    for i in 2001..=12_000 {
        t.with(key(i), |_| ()).unwrap();
    }
    assert_eq!(t.get(key(0), |s| s.mark), None);
}

#[test]
fn small_capacities_hold_exactly_their_bound() {
    for cap in [1usize, 2, 10] {
        let t = KeyTable::<St>::new(cap);
        for k in 0..cap as u64 {
            t.with(key(k), |s| s.mark = k + 1).unwrap();
        }
        assert_eq!((t.len(), t.evicted()), (cap, 0), "cap {cap}");
        for k in 0..cap as u64 {
            assert_eq!(t.get(key(k), |s| s.mark), Some(k + 1), "cap {cap}");
        }
        // One more key: exactly one goes.
        t.with(key(1000), |_| ()).unwrap();
        assert_eq!((t.len(), t.evicted()), (cap, 1), "cap {cap}");
        // Churn: never above the bound.
        for k in 2000..3000 {
            t.with(key(k), |s| s.mark = k + 1).unwrap();
            assert!(t.len() <= cap);
        }
        // An evicted key comes back with the default state.
        assert_eq!(t.get(key(2000), |_| ()), None, "cap {cap}");
        assert_eq!(t.with(key(2000), |s| s.clone()), Ok(St::default()));
    }
}

#[test]
fn busy_keys_stay_and_full_when_all_busy() {
    for cap in [1usize, 2, 10] {
        let t = KeyTable::<St>::new(cap);
        for k in 0..cap as u64 {
            t.with(key(k), |s| {
                s.mark = k + 1;
                s.busy = true;
            })
            .unwrap();
        }
        assert_eq!(t.with(key(99), |_| ()), Err(Full), "cap {cap}");
        assert_eq!(t.get(key(99), |_| ()), None);
        for k in 0..cap as u64 {
            assert_eq!(t.get(key(k), |s| s.mark), Some(k + 1));
        }
        // Release the last key: it is the one that makes room, at once (an
        // insert looks at 16 keys of main, so at every key of these
        // shards; larger ones: crates/keyed/src/tests.rs).
        let last = cap as u64 - 1;
        t.get(key(last), |s| s.busy = false).unwrap();
        assert_eq!(t.with(key(99), |_| ()), Ok(()), "cap {cap}");
        assert_eq!(t.get(key(last), |_| ()), None);
        for k in 0..last {
            assert_eq!(t.get(key(k), |s| s.mark), Some(k + 1));
        }
        assert_eq!(t.len(), cap);
    }
}

#[test]
fn hash_is_keyed_per_table() {
    let a = KeyTable::<St>::new(10);
    let b = KeyTable::<St>::new(10);
    let bytes = b"192.0.2.1";
    assert_eq!(a.hash(bytes), a.hash(bytes), "stable within a table");
    assert_ne!(a.hash(bytes), b.hash(bytes), "differs between tables");
    assert_ne!(a.hash(b"192.0.2.1"), a.hash(b"192.0.2.2"));
    // Not a fixed function of the bytes: different tables disagree on most.
    let same = (0u32..1000)
        .filter(|i| a.hash(&i.to_le_bytes()) == b.hash(&i.to_le_bytes()))
        .count();
    assert_eq!(same, 0);
}

#[test]
fn for_each_sees_every_key_once() {
    let t = KeyTable::<St>::new(5000);
    for k in 0..3000 {
        t.with(key(k), |s| s.mark = k + 1).unwrap();
    }
    let mut seen = std::collections::HashMap::new();
    t.for_each(|k, s| {
        assert!(seen.insert(k, s.mark).is_none());
    });
    assert_eq!(seen.len(), 3000);
    for k in 0..3000 {
        assert_eq!(seen[&key(k)], k + 1);
    }
}

/// Threads churning one table: the bound holds at every moment, each
/// thread's busy key survives, counters add up.
#[test]
fn threads_share_a_table() {
    let t = Arc::new(KeyTable::<St>::new(3000));
    let threads: Vec<_> = (0..4u64)
        .map(|th| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mine = key(1 << 50 | th);
                t.with(mine, |s| {
                    s.busy = true;
                    s.mark = th + 1;
                })
                .unwrap();
                for i in 0..50_000u64 {
                    t.with(key(th << 32 | i), |s| s.mark = i + 1).unwrap();
                    assert!(t.len() <= 3000);
                }
                assert_eq!(t.get(mine, |s| s.mark), Some(th + 1));
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(t.len(), 3000);
    let mut n = 0;
    t.for_each(|_, _| n += 1);
    assert_eq!(n, 3000);
    assert_eq!(t.evicted(), 4 * 50_001 - 3000);
}

/// Busy or sticky until a deadline: the checks see the time of the call.
#[derive(Default)]
struct Until {
    busy_until: u64,
    sticky_until: u64,
}

impl KeyState for Until {
    fn busy(&self, now: u64) -> bool {
        self.busy_until > now
    }

    fn sticky(&self, now: u64) -> bool {
        self.sticky_until > now
    }
}

#[test]
fn eviction_checks_see_the_time_given_to_the_call() {
    // Busy until 100: no room before, room after.
    let t = KeyTable::<Until>::new(1);
    t.with_at(key(1), 10, |s| s.busy_until = 100).unwrap();
    assert_eq!(t.with_at(key(2), 99, |_| ()), Err(Full));
    assert_eq!(t.with(key(2), |_| ()), Err(Full), "no time: 0");
    assert_eq!(t.with_at(key(2), 100, |_| ()), Ok(()));
    assert_eq!(t.get(key(1), |_| ()), None);

    // Two sticky keys, one until 100 and one until 200: at 150 the first
    // is idle and goes. Both orders, so that a table blind to the time (to
    // which both are sticky, and which picks the same cell both times)
    // fails one of them.
    for (a, b) in [(100, 200), (200, 100)] {
        let t = KeyTable::<Until>::new(2);
        t.with_at(key(1), 10, |s| s.sticky_until = a).unwrap();
        t.with_at(key(2), 10, |s| s.sticky_until = b).unwrap();
        let mut seen = Vec::new();
        t.with_evicted_at(key(3), 150, |_| (), |s| seen.push(s.sticky_until))
            .unwrap();
        assert_eq!(seen, [100], "order {a}, {b}");
    }
}
