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
mod tests;
