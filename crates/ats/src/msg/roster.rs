//! The rules a plugin's commands can name ([`Roster`]).
//!
//! ATS owns a remap plugin's rules: it creates them as remap.config is
//! loaded and deletes them after a later load, while a transaction may still
//! hold one. A roster lists them weakly (it never keeps a rule alive), in
//! creation order, with the load that made each one. It lives here, beside
//! [`serve`](super::serve), because it follows remap.config loads through
//! [`ReloadStatus`]; it calls no TS API, so it is tested without ATS.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use quoting::shorten;

use crate::ReloadStatus;

/// A plugin's live rules for its `traffic_ctl plugin msg` commands.
///
/// - A rule gone (its last `Arc` dropped) drops out; entries of gone rules
///   are pruned whenever a rule is enlisted.
/// - An optional filter ([`Roster::filtered`]) hides rules that still
///   exist but are no longer live (say, deleted by ATS while their last
///   transactions finish); they are pruned like gone ones.
/// - With [`pre_reload`](Roster::pre_reload) and
///   [`post_reload`](Roster::post_reload) called from the plugin's
///   [`RemapPlugin`](crate::RemapPlugin) hooks, rules are grouped by the
///   remap.config load that made them: once a load succeeds only its rules
///   are listed (a delayed request may still hold a rule of the previous
///   load); once a load fails, its rules are dropped and the previous ones
///   stay. A plugin that does not call them keeps every rule in one group.
///
/// The lock is taken by rule creation, reload notices and commands; never
/// by a request.
pub struct Roster<T> {
    state: Mutex<State<T>>,
    listed: fn(&T) -> bool,
}

struct State<T> {
    /// The remap.config load under way or last done (0: the first).
    load: u64,
    /// In creation order, each with the load that made it.
    rules: Vec<(u64, Weak<T>)>,
}

fn always<T>(_: &T) -> bool {
    true
}

impl<T> Roster<T> {
    /// A roster listing every rule that exists.
    pub const fn new() -> Self {
        Self::filtered(always::<T>)
    }

    /// A roster listing the rules that exist and pass `listed`.
    pub const fn filtered(listed: fn(&T) -> bool) -> Self {
        Roster {
            state: Mutex::new(State {
                load: 0,
                rules: Vec::new(),
            }),
            listed,
        }
    }

    /// Whether `rule` stays listed. A rule upgraded to check it goes into
    /// `held`, dropped by the caller after the lock: if that reference were
    /// the last, the rule's Drop must not run under the roster's lock.
    fn keeps(&self, rule: &Weak<T>, held: &mut Vec<Arc<T>>) -> bool {
        if rule.strong_count() == 0 {
            return false;
        }
        let Some(r) = rule.upgrade() else {
            return false;
        };
        let keep = (self.listed)(&r);
        held.push(r);
        keep
    }

    /// Lists a new rule, made by the current load.
    pub fn enlist(&self, rule: &Arc<T>) {
        let mut held = Vec::new();
        let mut s = self.state.lock();
        s.rules.retain(|(_, r)| self.keeps(r, &mut held));
        let load = s.load;
        s.rules.push((load, Arc::downgrade(rule)));
        drop(s);
        drop(held);
    }

    /// The listed rules, in the order they were created.
    pub fn live(&self) -> Vec<Arc<T>> {
        // Filtered after the lock: a rule dropped by the filter may be the
        // last reference (see `keeps`).
        let all: Vec<Arc<T>> = self
            .state
            .lock()
            .rules
            .iter()
            .filter_map(|(_, r)| r.upgrade())
            .collect();
        all.into_iter().filter(|r| (self.listed)(r)).collect()
    }

    /// The listed rules `matches` selects, in creation order; if none
    /// does, `Err` with the `label`s of all listed rules, joined by `, `
    /// and shortened, for an error message that tells what there is.
    pub fn select(
        &self,
        matches: impl Fn(&T) -> bool,
        label: impl Fn(&T) -> &str,
    ) -> Result<Vec<Arc<T>>, String> {
        let all = self.live();
        let found: Vec<Arc<T>> = all.iter().filter(|r| matches(r)).cloned().collect();
        if found.is_empty() {
            let labels: Vec<&str> = all.iter().map(|r| label(r)).collect();
            return Err(shorten(&labels.join(", ")));
        }
        Ok(found)
    }

    /// remap.config is about to be loaded again: rules enlisted from now on
    /// belong to a new load.
    pub fn pre_reload(&self) {
        self.state.lock().load += 1;
    }

    /// The current load ended: on success its rules replace the others; on
    /// failure ATS discarded them, and the previous ones stay.
    pub fn post_reload(&self, status: ReloadStatus) {
        let loaded = matches!(status, ReloadStatus::Loaded { .. });
        let mut held = Vec::new();
        let mut s = self.state.lock();
        let load = s.load;
        s.rules
            .retain(|(l, r)| self.keeps(r, &mut held) && ((*l == load) == loaded));
        drop(s);
        drop(held);
    }

    /// How many entries are held (gone rules not yet pruned included).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.state.lock().rules.len()
    }
}

impl<T> Default for Roster<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
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
}
