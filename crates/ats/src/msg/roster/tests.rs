use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

#[derive(Debug)]
struct Rule {
    name: &'static str,
    live: AtomicBool,
}

fn rule(name: &'static str) -> Arc<Rule> {
    Arc::new(Rule {
        name,
        live: AtomicBool::new(true),
    })
}

/// New rules named `names`, enlisted in that order.
fn enlisted<const N: usize>(roster: &Roster<Rule>, names: [&'static str; N]) -> [Arc<Rule>; N] {
    names.map(|n| {
        let r = rule(n);
        roster.enlist(&r);
        r
    })
}

fn names(rules: &[Arc<Rule>]) -> Vec<&'static str> {
    rules.iter().map(|r| r.name).collect()
}

fn is_live(r: &Rule) -> bool {
    r.live.load(Ordering::Acquire)
}

#[test]
fn lists_in_creation_order() {
    let roster = Roster::new();
    let _rules = enlisted(&roster, ["c", "a", "d", "b"]);
    assert_eq!(names(&roster.live()), ["c", "a", "d", "b"]);
}

#[test]
fn a_gone_rule_drops_out_and_is_pruned_on_enlist() {
    let roster = Roster::new();
    let [a, _b] = enlisted(&roster, ["a", "b"]);
    drop(a);
    assert_eq!(names(&roster.live()), ["b"]);
    assert_eq!(roster.held(), 2, "listing does not prune");
    let _c = enlisted(&roster, ["c"]);
    assert_eq!(roster.held(), 2, "enlisting prunes the gone rule");
    assert_eq!(names(&roster.live()), ["b", "c"]);
}

#[test]
fn the_roster_never_keeps_a_rule_alive() {
    let roster = Roster::new();
    let [a] = enlisted(&roster, ["a"]);
    let weak = Arc::downgrade(&a);
    drop(a);
    assert!(weak.upgrade().is_none());
    assert!(roster.live().is_empty());
}

#[test]
fn a_filter_hides_and_prunes_rules_no_longer_live() {
    let roster = Roster::filtered(is_live);
    let [a, _b] = enlisted(&roster, ["a", "b"]);
    a.live.store(false, Ordering::Release);
    assert_eq!(names(&roster.live()), ["b"]);
    roster.enlist(&rule("c"));
    // `a` still exists but is pruned; `c` is gone already.
    assert_eq!(roster.held(), 2);
    assert_eq!(names(&roster.live()), ["b"]);
    // Without a filter the same rule stays listed.
    let plain = Roster::new();
    plain.enlist(&a);
    assert_eq!(names(&plain.live()), ["a"]);
}

#[test]
fn a_filter_works_in_a_static() {
    static ROSTER: Roster<Rule> = Roster::filtered(|r| r.live.load(Ordering::Acquire));
    let a = rule("a");
    ROSTER.enlist(&a);
    assert_eq!(names(&ROSTER.live()), ["a"]);
    a.live.store(false, Ordering::Release);
    assert!(ROSTER.live().is_empty());
}

#[test]
fn a_successful_load_replaces_the_rules_of_earlier_loads() {
    let roster = Roster::new();
    let _old = enlisted(&roster, ["old1", "old2"]);
    roster.post_reload(ReloadStatus::Loaded { used: true });
    assert_eq!(names(&roster.live()), ["old1", "old2"], "startup load");
    roster.pre_reload();
    let _new = enlisted(&roster, ["new"]);
    // Until the load ends, both are listed.
    assert_eq!(names(&roster.live()), ["old1", "old2", "new"]);
    roster.post_reload(ReloadStatus::Loaded { used: true });
    // The old rules still exist (a request holds them) but are not listed.
    assert_eq!(names(&roster.live()), ["new"]);
    assert_eq!(roster.held(), 1);
}

#[test]
fn a_load_unused_by_the_plugin_still_replaces_its_rules() {
    let roster = Roster::new();
    let _old = enlisted(&roster, ["old"]);
    roster.pre_reload();
    roster.post_reload(ReloadStatus::Loaded { used: false });
    assert!(roster.live().is_empty());
}

#[test]
fn a_failed_load_drops_its_rules_and_keeps_the_previous_ones() {
    let roster = Roster::new();
    let _old = enlisted(&roster, ["old"]);
    roster.pre_reload();
    let _refused = enlisted(&roster, ["refused"]);
    roster.post_reload(ReloadStatus::Failed);
    assert_eq!(names(&roster.live()), ["old"]);
    // The next load's rules are a new group again.
    roster.pre_reload();
    let _next = enlisted(&roster, ["next"]);
    roster.post_reload(ReloadStatus::Loaded { used: true });
    assert_eq!(names(&roster.live()), ["next"]);
}

#[test]
fn a_load_ending_prunes_gone_and_filtered_rules() {
    let roster = Roster::filtered(is_live);
    let [a, b, _c] = enlisted(&roster, ["a", "b", "c"]);
    drop(a);
    b.live.store(false, Ordering::Release);
    roster.post_reload(ReloadStatus::Loaded { used: true });
    assert_eq!(roster.held(), 1);
    assert_eq!(names(&roster.live()), ["c"]);
}

#[test]
fn select_finds_in_order_or_lists_what_there_is() {
    let roster = Roster::new();
    let _rules = enlisted(&roster, ["x1", "y", "x2"]);
    let found = roster.select(|r| r.name.starts_with('x'), |r| r.name);
    assert_eq!(names(&found.unwrap()), ["x1", "x2"]);
    let none = roster.select(|r| r.name == "z", |r| r.name);
    assert_eq!(none.err().as_deref(), Some("x1, y, x2"));
    let empty: Roster<Rule> = Roster::new();
    assert_eq!(
        empty.select(|_| true, |r| r.name).err().as_deref(),
        Some("")
    );
}

#[test]
fn select_shortens_a_long_list() {
    let roster = Roster::new();
    let _rules = enlisted(&roster, ["a-rather-long-rule-name"; 200]);
    let known = roster.select(|_| false, |r| r.name).unwrap_err();
    assert_eq!(
        known,
        shorten(&vec!["a-rather-long-rule-name"; 200].join(", "))
    );
    assert!(known.ends_with(" bytes)"), "{known}");
}

/// A rule whose last reference is the roster's own check runs its Drop
/// after the roster's lock is released (its Drop may use the roster).
#[test]
fn a_rule_last_held_by_a_check_drops_outside_the_lock() {
    struct Probe;
    static ROSTER: Roster<Probe> = Roster::filtered(release_holder);
    static HOLDER: parking_lot::Mutex<Option<Arc<Probe>>> = parking_lot::Mutex::new(None);
    static DROPPED_LOCKED: AtomicBool = AtomicBool::new(false);
    static DROPPED: AtomicBool = AtomicBool::new(false);
    // The filter lets go of the only other reference: the check's is last.
    fn release_holder(_: &Probe) -> bool {
        drop(HOLDER.lock().take());
        false
    }
    impl Drop for Probe {
        fn drop(&mut self) {
            DROPPED_LOCKED.fetch_or(ROSTER.state.is_locked(), Ordering::SeqCst);
            DROPPED.store(true, Ordering::SeqCst);
        }
    }
    for check in [0, 1, 2] {
        let p = Arc::new(Probe);
        ROSTER.enlist(&p);
        *HOLDER.lock() = Some(p);
        DROPPED.store(false, Ordering::SeqCst);
        let newer = Arc::new(Probe);
        match check {
            0 => ROSTER.enlist(&newer),
            1 => assert!(ROSTER.live().is_empty()),
            _ => ROSTER.post_reload(ReloadStatus::Failed),
        }
        assert!(DROPPED.load(Ordering::SeqCst), "check {check}: dropped");
        assert!(
            !DROPPED_LOCKED.load(Ordering::SeqCst),
            "check {check}: under the lock"
        );
        drop(newer);
    }
}
