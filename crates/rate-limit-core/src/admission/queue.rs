//! The slot queue after a rate wait, in either scope, and taking out the
//! waiters whose clients left.

use std::sync::Arc;

use limits::{Clock, FlowRefused, Nanos, Slots, Waiter};

use super::decision::SlotWait;
use super::limiter::{Limiter, Scope};
use super::rule_scope::RuleSlots;

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// After the rate wait of a request that started waiting at `since`:
    /// expire it, let it go, or queue it for a slot (of its key, if keyed).
    pub(crate) fn wait_for_slot(&self, since: Nanos, waiter: W, key: Option<u64>) -> SlotWait<W> {
        let mut now = None;
        let slots = match (&self.scope, key) {
            (Scope::Rule(rule), _) => rule.slots().cloned(),
            (Scope::Keyed(scope), _) if scope.limit().is_none() => None,
            (Scope::Keyed(scope), Some(k)) => {
                let n = self.clock.now();
                now = Some(n);
                // The limit is read again under the shard lock (see admit_in_key).
                let s = scope
                    .table
                    .with_at(k, n, |st| st.slots(scope.limit().unwrap_or(u32::MAX)));
                match s {
                    Ok(s) => Some(s),
                    // Cannot happen while the waiter's queue place pins the
                    // key; if it does, refuse rather than wait unlimited.
                    Err(_) => return SlotWait::Expired(waiter),
                }
            }
            (Scope::Keyed(_), None) => None,
        };
        let Some(slots) = slots else {
            return SlotWait::Go(waiter);
        };
        let now = now.unwrap_or_else(|| self.clock.now());
        let deadline = Some(self.max_wait())
            .filter(|&m| m != Nanos::MAX)
            .map(|m| since.saturating_add(m));
        if deadline.is_some_and(|d| d <= now) {
            return SlotWait::Expired(waiter);
        }
        let ticket = match (&self.scope, key) {
            // A fair limiter's key is the flow; its share (after a rate
            // wait, it was not checked) and queue part are checked as it joins.
            (Scope::Rule(rule), Some(flow)) if matches!(rule.slots, RuleSlots::Fair { .. }) => {
                match slots.try_enqueue_flow(flow, waiter) {
                    Ok(t) => t,
                    Err(FlowRefused::Over(w) | FlowRefused::Full(w)) => {
                        return SlotWait::Refused(w)
                    }
                }
            }
            _ => slots.enqueue(waiter),
        };
        if let Scope::Keyed(scope) = &self.scope {
            if ticket.is_waiting() {
                // After the enqueue: a departure check that finds this queue
                // empty and drops it from the list does so under the list's
                // lock, before or after this insert, never between.
                scope
                    .waiting_queues
                    .lock()
                    .insert(Arc::as_ptr(&slots) as usize, Arc::downgrade(&slots));
            }
        }
        SlotWait::Queued {
            ticket,
            expires_in: deadline.map(|d| d - now),
        }
    }

    /// Takes out of the queues the first `max` waiters (oldest first, per
    /// queue) for which `gone` is true: clients that left. `gone` may be
    /// slow. Also returns how many waiters remain.
    pub fn remove_departed(&self, max: usize, mut gone: impl FnMut(&W) -> bool) -> (Vec<W>, u32) {
        let queues: Vec<Arc<Slots<W>>> = match &self.scope {
            Scope::Rule(rule) => rule.slots().into_iter().cloned().collect(),
            Scope::Keyed(scope) => {
                let mut list = scope.waiting_queues.lock();
                let mut live = Vec::new();
                list.retain(|_, weak| match weak.upgrade() {
                    Some(s) if s.waiting() > 0 => {
                        live.push(s);
                        true
                    }
                    _ => false,
                });
                live
            }
        };
        let mut checked = 0;
        let mut out = Vec::new();
        let mut left = 0u32;
        for slots in queues {
            out.extend(slots.remove_waiting(|w| {
                checked += 1;
                checked <= max && gone(w)
            }));
            left = left.saturating_add(slots.waiting());
        }
        (out, left)
    }
}
