//! Per-key control, for the `block`, `unblock`, `forget` and `key`
//! commands: changes to one key's state (or, on a rule-scoped limiter, the
//! rule's) from off the request path.

use limits::{Clock, Nanos, Waiter};

use super::limiter::{Limiter, Scope};

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// Blocks `key` (or, on a rule-scoped limiter, the rule) for `length`
    /// from now, whether or not it is over its rate (`block TARGET KEY
    /// SECONDS`); a key not held yet is added. False if there was no room
    /// for the key (every key of its shard busy).
    pub fn block(&self, key: Option<u64>, length: Nanos) -> bool {
        let now = self.clock.now();
        let until = now.saturating_add(length);
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => {
                let t = &scope.table;
                t.with_evicted_at(
                    k,
                    now,
                    |st| st.block_until(until),
                    |st| scope.carry(t.shard_index(k), st),
                )
                .is_ok()
            }
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => {
                rule.block.set(until);
                true
            }
        }
    }

    /// Lifts the block of `key` (or of the rule): true if one held.
    pub fn unblock(&self, key: Option<u64>) -> bool {
        let now = self.clock.now();
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => scope
                .table
                .get(k, |st| {
                    let held = st.blocked(now);
                    st.block_until(0);
                    held
                })
                .unwrap_or(false),
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => {
                let held = rule.block.holds(now);
                rule.block.set(0);
                held
            }
        }
    }

    /// How long the block of `key` (or of the rule) still holds, if one does.
    pub fn blocked_for(&self, key: Option<u64>) -> Option<Nanos> {
        let now = self.clock.now();
        let until = match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => scope.table.get(k, |st| st.block_ends(now))?,
            (Scope::Keyed(_), None) => None,
            (Scope::Rule(rule), _) => rule.block.until(now),
        }?;
        Some(until - now)
    }

    /// Forgets what `key` owes (or the rule, on a rule-scoped limiter): its
    /// bucket is full again, and its block and `--count-status` lock-out
    /// are lifted. The slots it holds and its waiters stay (they are given
    /// back as usual). True if the table held the key.
    pub fn forget(&self, key: Option<u64>) -> bool {
        match (&self.scope, key) {
            (Scope::Keyed(scope), Some(k)) => scope
                .table
                .get(k, |st| {
                    st.tat = 0;
                    if let Some(q) = &mut st.queues {
                        q.blocked_until = 0;
                        q.locked_until = 0;
                    }
                })
                .is_some(),
            (Scope::Keyed(_), None) => false,
            (Scope::Rule(rule), _) => {
                rule.block.set(0);
                if let Some(b) = &rule.bucket {
                    b.reset();
                }
                true
            }
        }
    }
}
