//! One table's shards: their bounds, filling, an idle probation key beside a
//! busy main, `with_evicted`, zero capacity, Send + Sync, a missing time.

use super::*;

#[test]
fn shard_bounds_add_up_exactly() {
    for cap in [0, 1, 2, 10, 1023, 1024, 2048, 5000, 65_537, 1_000_000] {
        let t = KeyTable::<T>::new(cap);
        let sum: usize = (0..t.shards.len()).map(|i| shard_cap(&t, i)).sum();
        assert_eq!(sum, cap);
        assert!(t.shards.len() <= 64);
        if cap < 2048 {
            assert_eq!(t.shards.len(), 1, "small tables are one shard");
        }
    }
}

#[test]
fn fills_to_the_bound_in_one_shard() {
    let t = KeyTable::<T>::with_shards(5000, 1);
    for k in 0..5000 {
        t.with(key(k), |s| s.mark = u32::from(k) + 1).unwrap();
    }
    assert_eq!((t.len(), t.evicted()), (5000, 0));
    for k in 0..5000 {
        assert_eq!(t.get(key(k), |s| s.mark), Some(u32::from(k) + 1));
    }
    check_shards(&t);
}

/// Main all busy, probation below its share with one idle key: that key
/// goes (not `Full`).
#[test]
fn idle_probation_key_goes_when_main_is_all_busy() {
    let t = KeyTable::<T>::with_shards(20, 1); // probation: 2 keys
    for k in 0..20 {
        t.with(key(k), |_| ()).unwrap();
    }
    // Probation holds the last two; main the first 18.
    for k in 0..19 {
        t.with(key(k), |s| s.busy = true).unwrap();
    }
    // 18 (busy) graduates to main; 19 (idle) is the only candidate.
    t.with(key(20), |s| s.mark = 20).unwrap();
    assert_eq!(t.get(key(19), |_| ()), None);
    assert_eq!(t.get(key(20), |s| s.mark), Some(20));
    // Now 20 is the only idle key.
    t.with(key(21), |_| ()).unwrap();
    assert_eq!(t.get(key(20), |_| ()), None);
    // 21 busy too: nothing can go.
    t.with(key(21), |s| s.busy = true).unwrap();
    assert_eq!(t.with(key(22), |_| ()), Err(Full));
    assert_eq!(t.len(), 20);
    // One release makes room again, for exactly one key: the table is not
    // told, and each insert looks at SCAN keys of main on from the hand
    // (evict.rs), so the hand reaches the freed key within 20 / SCAN.
    t.get(key(3), |s| s.busy = false).unwrap();
    let mut tries = 0;
    while t.with(key(22), |_| ()).is_err() {
        tries += 1;
        assert!(
            tries < 20usize.div_ceil(SCAN),
            "the freed key was not found"
        );
    }
    assert_eq!(t.get(key(3), |_| ()), None);
    t.get(key(22), |s| s.busy = true).unwrap();
    assert_eq!(t.with(key(23), |_| ()), Err(Full));
    assert_eq!((t.len(), t.evicted()), (20, 3));
    check_shards(&t);
}

#[test]
fn with_evicted_sees_the_victim_before_it_is_dropped() {
    let t = full_table(10, |_| ());
    t.for_each_mut(|k, s| s.mark = k as u32);
    let mut seen = Vec::new();
    t.with_evicted(key(100), |_| (), |s| seen.push(s.mark))
        .unwrap();
    assert_eq!(seen.len(), 1);
    assert!((0..10).any(|k| key(k) as u32 == seen[0]));
    assert_eq!(t.len(), 10);
}

#[test]
fn zero_capacity_holds_nothing() {
    let t = KeyTable::<T>::new(0);
    assert_eq!(t.with(key(1), |_| ()), Err(Full));
    assert_eq!(t.get(key(1), |_| ()), None);
    assert_eq!((t.len(), t.capacity(), t.evicted()), (0, 0, 0));
}

#[test]
fn table_is_send_and_sync() {
    fn shared<X: Send + Sync>() {}
    shared::<KeyTable<T>>();
}

/// A state whose checks read the time, called without it: caught in debug
/// builds (the 0 passed instead would keep every key ever in debt).
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "needs with_at")]
fn a_time_dependent_state_without_the_time_is_caught() {
    #[derive(Default)]
    struct Timed;
    impl KeyState for Timed {
        const USES_TIME: bool = true;
    }
    let table: KeyTable<Timed> = KeyTable::new(16);
    let _ = table.with(1, |_| ());
}
