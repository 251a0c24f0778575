use super::*;
use proptest::prelude::*;

#[test]
fn nobody_at_zero_everybody_at_a_hundred() {
    for h in [0, 1, u64::MAX, 0xdead_beef] {
        assert!(!chosen(h, 0));
        assert!(chosen(h, 100));
    }
    assert!((0..1000).all(|_| !chosen_now(0)));
    assert!((0..1000).all(|_| chosen_now(100)));
}

#[test]
fn the_share_of_keys_follows_the_percentage() {
    // Sequential keys (the weakest case for a hash) spread evenly.
    for percent in [1u8, 10, 25, 50, 90] {
        let n = 100_000u64;
        let hit = (0..n).filter(|&k| chosen(k, percent)).count() as f64;
        let share = hit / n as f64 * 100.0;
        assert!(
            (share - f64::from(percent)).abs() < 1.0,
            "{percent} %: {share:.2} %"
        );
    }
}

#[test]
fn the_share_of_requests_follows_the_percentage() {
    for percent in [5u8, 50, 95] {
        let n = 100_000;
        let hit = (0..n).filter(|_| chosen_now(percent)).count() as f64;
        let share = hit / f64::from(n) * 100.0;
        assert!(
            (share - f64::from(percent)).abs() < 1.0,
            "{percent} %: {share:.2} %"
        );
    }
}

proptest! {
    /// Raising the share only adds clients; the ends take nobody and everybody.
    #[test]
    fn raising_the_share_only_adds_clients(hash: u64, a in 0u8..=100, b in 0u8..=100) {
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(!chosen(hash, lo) || chosen(hash, hi));
        prop_assert!(!chosen(hash, 0) && chosen(hash, 100));
    }
}
