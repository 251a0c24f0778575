//! What a limiter holds, for reports: [`Usage`] (`show`), the busiest
//! keys ([`KeyUsage`], `top`) and what is left for `RateLimit` fields.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use limits::{Clock, GcraParams, Nanos, Quota, Slots, Waiter};

use super::key_scope::Keyed;
use super::limiter::{Limiter, Scope};

/// What a limiter holds right now (for `show`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Slots held.
    pub active: u64,
    /// Requests waiting (for the rate or a slot).
    pub waiting: u64,
    /// Keys held (keyed).
    pub keys: Option<u64>,
    /// Keys evicted so far (keyed).
    pub evicted: Option<u64>,
}

/// One key's state (for `top`, `keys` and `key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyUsage {
    pub key: u64,
    pub active: u32,
    pub waiting: u32,
    /// How far the key's bucket is past empty: the wait a request would
    /// have now (0: it conforms).
    pub over_rate: Nanos,
    /// Requests its bucket would let through now; `None`: no `--rate`.
    pub tokens: Option<u32>,
    /// How long its block (`--block`, or the `block` command) still holds
    /// (0: none).
    pub blocked: Nanos,
}

/// A [`KeyUsage`] ordered for `top`: more slots and waiters first, then
/// further over the rate, then blocked longer, then the smaller key (so the
/// order is total).
#[derive(PartialEq, Eq)]
struct Ranked(KeyUsage);

impl Ranked {
    fn rank(&self) -> (u64, Nanos, Nanos, Reverse<u64>) {
        let k = &self.0;
        (
            u64::from(k.active) + u64::from(k.waiting),
            k.over_rate,
            k.blocked,
            Reverse(k.key),
        )
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// What the limiter holds now. Keyed, this visits every key (under
    /// each shard's lock in turn): run it off request paths.
    pub fn usage(&self) -> Usage {
        match &self.scope {
            Scope::Rule(rule) => Usage {
                active: rule.slots().map_or(0, |s| u64::from(s.active())),
                waiting: u64::from(rule.budget.used()),
                keys: None,
                evicted: None,
            },
            Scope::Keyed(scope) => {
                let t = &scope.table;
                let mut u = Usage {
                    keys: Some(t.len() as u64),
                    evicted: Some(t.evicted()),
                    ..Usage::default()
                };
                t.for_each(|_, st| {
                    if let Some(q) = &st.queues {
                        if let Some(s) = &q.slots {
                            u.active += u64::from(s.active());
                        }
                        if let Some(b) = &q.budget {
                            u.waiting += u64::from(b.used());
                        }
                    }
                });
                u
            }
        }
    }

    /// One key's state, if the table holds it; on a rule-scoped limiter
    /// (`key` ignored), the rule's, as key 0. Never adds the key.
    pub fn key_usage(&self, key: Option<u64>) -> Option<KeyUsage> {
        let now = self.clock.now();
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                let params = scope.params();
                scope.table.get(k, |st| usage_of(k, st, now, params))
            }
            (Scope::Keyed(_), None) => None,
            (Scope::Rule(rule), _) => Some(KeyUsage {
                key: 0,
                active: rule.slots().map_or(0, |s| s.active()),
                waiting: rule.budget.used(),
                over_rate: rule
                    .bucket
                    .as_ref()
                    .map_or(0, |b| b.check(now).err().unwrap_or(0)),
                tokens: rule.bucket.as_ref().map(|b| b.quota(now).remaining),
                blocked: rule.block.until(now).map_or(0, |until| until - now),
            }),
        }
    }

    /// The `n` keys holding the most slots and waiters, then furthest over
    /// their rate, then blocked longest (keyed; empty otherwise), ties by
    /// key; keys with none of these are left out. Visits every key, one
    /// shard's lock at a time (off request paths), and keeps only the best
    /// `n` in a heap: memory is O(n) however many keys there are.
    pub fn top(&self, n: usize) -> Vec<KeyUsage> {
        let Scope::Keyed(scope) = &self.scope else {
            return Vec::new();
        };
        if n == 0 {
            return Vec::new();
        }
        let t = &scope.table;
        let now = self.clock.now();
        let params = scope.params();
        // A min-heap (by rank) of the best n so far: its root is the weakest.
        let mut best: BinaryHeap<Reverse<Ranked>> = BinaryHeap::with_capacity(n + 1);
        t.for_each(|key, st| {
            let u = usage_of(key, st, now, params);
            if u.active + u.waiting == 0 && u.over_rate == 0 && u.blocked == 0 {
                return;
            }
            let k = Ranked(u);
            if best.len() < n {
                best.push(Reverse(k));
            } else if best.peek().is_some_and(|Reverse(weakest)| k > *weakest) {
                best.pop();
                best.push(Reverse(k));
            }
        });
        // Ascending Reverse = descending rank: the strongest first.
        best.into_sorted_vec()
            .into_iter()
            .map(|Reverse(r)| r.0)
            .collect()
    }

    /// Slots left, and the rate quota, of the rule or of `key`, for
    /// `RateLimit` response fields.
    pub(crate) fn remaining(&self, key: Option<u64>) -> (Option<u32>, Option<Quota>) {
        let now = self.clock.now();
        let left = |s: &Arc<Slots<W>>| s.limit().saturating_sub(s.active());
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                let (limit, params) = (scope.limit(), scope.params());
                scope
                    .table
                    .get(k, |st| {
                        let held = st.queues.as_ref().and_then(|q| q.slots.as_ref());
                        let slots = limit.map(|l| held.map_or(l, left));
                        let quota = params.map(|p| match st.block_ends(now) {
                            // Blocked: nothing until the block ends, however full.
                            Some(until) => blocked_quota(until - now),
                            None => p.quota(st.tat, now),
                        });
                        (slots, quota)
                    })
                    .unwrap_or((limit, params.map(|p| p.quota(0, now))))
            }
            (Scope::Keyed(_), None) => (None, None),
            (Scope::Rule(rule), _) => (
                rule.slots().map(left),
                rule.bucket.as_ref().map(|b| match rule.block.until(now) {
                    Some(until) => blocked_quota(until - now),
                    None => b.quota(now),
                }),
            ),
        }
    }
}

/// The quota of a key (or rule) blocked for `left` more: none, until then.
fn blocked_quota(left: Nanos) -> Quota {
    Quota {
        remaining: 0,
        replenish_in: left,
    }
}

/// What `key`'s state `st` holds at `now`.
fn usage_of<W: Waiter>(
    key: u64,
    st: &Keyed<W>,
    now: Nanos,
    params: Option<GcraParams>,
) -> KeyUsage {
    let (active, waiting) = st.queues.as_ref().map_or((0, 0), |q| {
        (
            q.slots.as_ref().map_or(0, |s| s.active()),
            q.budget.as_ref().map_or(0, |b| b.used()),
        )
    });
    KeyUsage {
        key,
        active,
        waiting,
        over_rate: params.map_or(0, |p| p.reserve(st.tat, now, None).0.wait()),
        tokens: params.map(|p| p.quota(st.tat, now).remaining),
        blocked: st.block_ends(now).map_or(0, |until| until - now),
    }
}
