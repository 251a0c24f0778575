//! A new request's decision, one entry point per shape: the rule's
//! ([`Limiter::admit_rule`]), a flow's (`admit_flow`), a key's
//! (`admit_key_tagged`). Each runs the decision of the limiter's scope:
//! `admit/rule.rs` or `admit/key.rs`.

use std::sync::Arc;

use limits::{Clock, Waiter};

use super::decision::{Admission, Refused};
use super::limiter::{Limiter, Scope};

mod key;
mod rule;

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Decides a new request of a rule-scoped limiter: the rate bucket
    /// first, then a slot (on a fair limiter, in the flow of the empty
    /// value). A keyed limiter refuses it ([`Refused::KeyMissing`]): the
    /// plugin applies `--key-missing` before asking.
    pub(crate) fn admit_rule(self: &Arc<Self>) -> Admission<W, C> {
        match &self.scope {
            Scope::Rule(r) => self.admit_in_rule(r, 0),
            Scope::Keyed(_) => Admission::Reject(Refused::KeyMissing),
        }
    }

    /// [`admit_rule`](Self::admit_rule) for a request of `flow` (a
    /// [`flow_key`](Self::flow_key)) on a fair limiter (`--fair`), which
    /// shares its slots between flows. A rule limiter that is not fair
    /// ignores the flow; a keyed limiter refuses ([`Refused::KeyMissing`]):
    /// a flow is no client key.
    pub(crate) fn admit_flow(self: &Arc<Self>, flow: u64) -> Admission<W, C> {
        match &self.scope {
            Scope::Rule(r) => self.admit_in_rule(r, flow),
            Scope::Keyed(_) => Admission::Reject(Refused::KeyMissing),
        }
    }

    /// Decides a new request of a keyed limiter under `key` (a hash of
    /// [`keys`](Self::keys)): its bucket first, then its slot. Refused when
    /// every key held is busy (the table is full of keys holding slots or
    /// waiters). A rule-scoped limiter ignores the key and applies the
    /// rule's limits, which bind every request anyway; a fair one puts it in
    /// flow 0 (the plugin never asks so: `--fair` excludes `--key`, and its
    /// requests come through [`admit_flow`](Self::admit_flow)).
    #[cfg(test)]
    pub(crate) fn admit_key(self: &Arc<Self>, key: u64) -> Admission<W, C> {
        self.admit_key_tagged(key, &[])
    }

    /// [`admit_key`](Self::admit_key) for a peered limiter: `tag` is the
    /// key's peer tag (whose hash is `key`), kept with the key for its
    /// reports. Other keyed limiters ignore it.
    pub(crate) fn admit_key_tagged(self: &Arc<Self>, key: u64, tag: &[u8]) -> Admission<W, C> {
        match &self.scope {
            Scope::Keyed(k) => self.admit_in_key(k, key, tag),
            Scope::Rule(r) => self.admit_in_rule(r, 0),
        }
    }

    /// One call for every scope: `key` is the key (keyed), the flow (fair)
    /// or absent ([`Shaped::admit`](super::Shaped::admit), and tests written
    /// against every scope).
    pub(crate) fn admit_in_scope(
        self: &Arc<Self>,
        key: Option<u64>,
        tag: &[u8],
    ) -> Admission<W, C> {
        match (&self.scope, key) {
            (_, None) => self.admit_rule(),
            (Scope::Rule(_), Some(f)) => self.admit_flow(f),
            (Scope::Keyed(_), Some(k)) => self.admit_key_tagged(k, tag),
        }
    }
}
