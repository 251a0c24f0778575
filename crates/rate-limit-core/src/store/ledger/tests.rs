use super::{KeySync, Ledger, MAX_REMEMBERED};

#[test]
fn others_hits_are_the_totals_less_our_own_once_per_period() {
    let mut k = KeySync::default();
    k.record(100, 5);
    // Periods 98 and 99: all others'.
    assert_eq!(k.learn(100, [40, 7]), Some(47));
    k.record(100, 3);
    assert_eq!(k.learn(100, [40, 7]), None, "applied already");
    k.record(101, 2);
    // Period 100's total 20 includes our 8.
    assert_eq!(k.learn(101, [20, 40]), Some(12));
    assert_eq!(k.learn(101, [20, 40]), None);
    // A skipped period: 102 and 103 learned together at 104.
    k.record(102, 1);
    k.record(104, 1);
    assert_eq!(k.learn(104, [30, 11]), Some(40));
    // Only ours.
    k.record(105, 4);
    assert_eq!(k.learn(106, [4, 1]), None, "nothing from others");
}

#[test]
fn a_full_ledger_forgets_the_keys_not_synced_lately() {
    let mut l = Ledger::default();
    for i in 0..MAX_REMEMBERED as u64 {
        l.synced(&i.to_le_bytes(), 1, 10, [0, 0]);
    }
    // One key kept fresh; the others were last synced in period 10.
    assert_eq!(l.synced(&0u64.to_le_bytes(), 1, 13, [0, 0]), None);
    assert_eq!(l.len(), MAX_REMEMBERED);
    // A new key past the bound: the stale ones go, the fresh one stays.
    assert_eq!(l.synced(b"new", 2, 13, [5, 0]), Some(5));
    assert_eq!(l.len(), 2);
    // Period 12's total of 3 for key 0 comes after 12 was applied (as 0).
    assert_eq!(
        l.synced(&0u64.to_le_bytes(), 1, 13, [3, 0]),
        None,
        "12 and 11 were applied at 13"
    );
}
