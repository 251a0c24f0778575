//! Floods of new keys into shards of busy or sticky keys: O(1) per insert,
//! idle keys evicted before keys in debt.

use super::*;

/// Issue 21: a flood of new keys into a shard whose keys are all busy is
/// refused at O(1) cost per insert, not a sweep of the shard each
/// (`busy()` calls count the keys looked at).
#[test]
fn flood_into_a_busy_shard_costs_o1_per_insert() {
    let t = full_table(1000, |s| s.busy = true);
    let before = busy_calls();
    for k in 0..2000 {
        assert_eq!(t.with(key(10_000 + k), |_| ()), Err(Full));
    }
    let per_insert = (busy_calls() - before) / 2000;
    // Old: ~2,000 (probation, CLOCK and probation again, every time).
    assert!(
        per_insert <= 2 * SCAN as u64,
        "{per_insert} busy() calls per insert"
    );
    // Still finds a key freed meanwhile, within cap / SCAN inserts.
    t.get(key(500), |s| s.busy = false).unwrap();
    let found = (0..1000 / SCAN as u16 + 2).any(|k| t.with(key(20_000 + k), |_| ()).is_ok());
    assert!(found);
    assert_eq!(t.get(key(500), |_| ()), None);
    check_shards(&t);
}

/// Sticky keys (debt) are evicted rather than refuse a new key, at O(1)
/// per insert, and only when no key is idle.
#[test]
fn sticky_keys_yield_to_new_keys_but_after_idle_ones() {
    let t = full_table(1000, |s| s.sticky = true);
    t.get(key(7), |s| s.sticky = false).unwrap();
    t.with(key(5000), |s| s.mark = 1).unwrap();
    assert_eq!(t.get(key(7), |_| ()), None, "the idle key went first");
    let before = busy_calls();
    for k in 0..2000 {
        t.with(key(10_000 + k), |s| s.mark = 2).unwrap();
    }
    let per_insert = (busy_calls() - before) / 2000;
    assert!(
        per_insert <= 2 * SCAN as u64,
        "{per_insert} busy() calls per insert"
    );
    assert_eq!(t.len(), 1000);
    // The flood's own keys (idle, in probation) evicted each other once
    // probation was full: most sticky keys are still there.
    let sticky = contents(&t).values().filter(|s| s.sticky).count();
    assert!(sticky >= 800, "{sticky} sticky keys left");
    check_shards(&t);
}

/// A one-shard table of 1000 keys in main, each 10th idle and the others
/// marked with `f` (busy or sticky).
fn mostly(f: impl Fn(&mut T)) -> KeyTable<T> {
    let t = full_table(1000, |_| ());
    for k in 0..1000 {
        if k % 10 != 0 {
            t.get(key(k), |s| f(s)).unwrap();
        }
    }
    t
}

/// A flood of new keys each seen twice: each leaves probation for main with
/// a zero counter, alone among keys that cannot go.
fn touch_twice_flood(t: &KeyTable<T>, keys: u16) -> u64 {
    let before = busy_calls();
    for k in 0..keys {
        t.with(key(10_000 + k), |_| ()).unwrap();
        t.with(key(10_000 + k), |_| ()).unwrap();
    }
    busy_calls() - before
}

/// Issue 21 review: keys seen twice defeat a search that only stops
/// sweeping after a sweep found nothing (each graduates, and CLOCK swept
/// ~n/2 cells to it: 557 `busy()` calls per new key). The search's credit
/// bounds it, in a shard mostly busy and in one mostly in debt.
#[test]
fn touch_twice_flood_costs_o1_per_insert() {
    for (what, t) in [
        ("busy", mostly(|s| s.busy = true)),
        ("sticky", mostly(|s| s.sticky = true)),
    ] {
        let per_insert = touch_twice_flood(&t, 2000) / 2000;
        assert!(
            per_insert <= 2 * SCAN as u64,
            "{what}: {per_insert} busy() calls per insert"
        );
        assert_eq!(t.len(), 1000);
        let kept = contents(&t).values().filter(|s| s.busy || s.sticky).count();
        assert_eq!(kept, 900, "{what}: keys that could stay were evicted");
        check_shards(&t);
    }
}

/// Issue 21 review: with idle keys at hand (the flood's own), keys in debt
/// are not evicted for a flood of keys seen twice.
#[test]
fn touch_twice_flood_spares_keys_in_debt() {
    let t = full_table(1000, |s| s.sticky = true);
    touch_twice_flood(&t, 2000);
    let sticky = contents(&t).values().filter(|s| s.sticky).count();
    // Only while no idle key exists (before the flood's first key).
    assert!(sticky >= 990, "{sticky} of 1000 keys in debt left");
    check_shards(&t);
}
