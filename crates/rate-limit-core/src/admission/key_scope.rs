//! The keyed scope (`--key`): each key's own bucket, slots and queue
//! places, held in the limiter's [`KeyTable`], and what a peered scope
//! adds to them (worked by `peered.rs`). Its state only; a request's
//! decision under its key is `admit/key.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use keyed::{KeyState, KeyTable};
use limits::{Budget, BudgetToken, GcraParams, LiveParams, Nanos, Slots, Waiter};

use super::bounds::Limits;

/// The state of a keyed limiter.
pub(super) struct KeyedScope<W: Waiter> {
    pub(super) table: KeyTable<Keyed<W>>,
    /// Each key's concurrency limit; `None`: no `--limit` (part of the
    /// limiter's shape).
    limit: Option<AtomicU32>,
    /// Each key's queue places.
    queue: AtomicU32,
    /// Each key's bucket parameters; `None`: no `--rate`.
    params: Option<LiveParams>,
    /// The keys' slot queues that have had waiters since the last
    /// departure check (by address), so the check visits those, not every
    /// key.
    pub(super) waiting_queues: Mutex<HashMap<usize, Weak<Slots<W>>>>,
    /// Joins the peer exchange (`--peers`): keys carry their peer tag and
    /// the hits not yet reported (see `peered.rs`).
    pub(super) peered: Option<Peered>,
}

/// One key's limits: its bucket's TAT, and (boxed, allocated the first time
/// the key needs them) its slots and queue places. 16 bytes inline.
pub struct Keyed<W: Waiter> {
    pub(super) tat: Nanos,
    pub(super) queues: Option<Box<KeyQueues<W>>>,
}

pub(super) struct KeyQueues<W: Waiter> {
    pub(super) slots: Option<Arc<Slots<W>>>,
    pub(super) budget: Option<Arc<Budget>>,
    /// Peered limiters only: the key's tag and unreported hits.
    pub(super) peer: Option<PeerKey>,
    /// `--count-status`: until when charges keep the key refused (0: never
    /// locked out). Forgetting it would hand the client a fresh burst.
    pub(super) locked_until: Nanos,
    /// `--block`: until when the key is refused at once (0: not blocked;
    /// see `block.rs`).
    pub(super) blocked_until: Nanos,
}

/// What a peered keyed scope adds: the unreported hits of keys evicted
/// since the last report, per shard of the key table (bounded, see
/// `dthrottle::evicted`).
pub(super) struct Peered {
    pub(super) evicted_hits: dthrottle::ShardedEvictedHits,
    /// Blocks started here since the last report (`--block`), each its
    /// tag and end; at most the report's tags (later ones are dropped and
    /// counted). Taken inside a shard's lock or alone, never around one.
    pub(super) blocks: Mutex<NewBlocks>,
}

/// The blocks for the next report, bounded.
pub(super) struct NewBlocks {
    pub(super) list: Vec<(Box<[u8]>, Nanos)>,
    pub(super) max: usize,
    pub(super) dropped: u64,
}

/// A peered key's tag and the hits served here since the last report.
pub(super) struct PeerKey {
    pub(super) tag: Box<[u8]>,
    pub(super) hits: u32,
    /// Until when the bucket is below zero (0: not in debt).
    pub(super) debt_until: Nanos,
}

impl<W: Waiter> KeyedScope<W> {
    pub(super) fn new(limits: Limits, table: KeyTable<Keyed<W>>, peered: Option<Peered>) -> Self {
        KeyedScope {
            table,
            limit: limits.limit.map(AtomicU32::new),
            queue: AtomicU32::new(limits.queue),
            params: limits
                .rate
                .map(|(r, b)| LiveParams::new(GcraParams::per_second(r, b))),
            waiting_queues: Mutex::new(HashMap::new()),
            peered,
        }
    }

    /// Each key's concurrency limit; `None`: no concurrency limit.
    pub(super) fn limit(&self) -> Option<u32> {
        self.limit.as_ref().map(|l| l.load(Ordering::Relaxed))
    }

    /// Each key's queue places.
    pub(super) fn queue(&self) -> u32 {
        self.queue.load(Ordering::Relaxed)
    }

    /// Each key's bucket parameters; `None`: no rate.
    pub(super) fn params(&self) -> Option<GcraParams> {
        self.params.as_ref().map(LiveParams::get)
    }

    pub(super) fn reconfigure(&self, params: Option<GcraParams>, limit: u32, queue: u32) {
        if let (Some(live), Some(p)) = (&self.params, params) {
            live.set(p);
        }
        self.queue.store(queue, Ordering::Relaxed);
        if let Some(l) = &self.limit {
            l.store(limit, Ordering::Relaxed);
        }
        // Clones first: raising a limit admits waiters, which must not
        // run under the table's locks.
        let mut held = Vec::new();
        self.table.for_each(|_, st| {
            if let Some(q) = &st.queues {
                held.push((q.slots.clone(), q.budget.clone()));
            }
        });
        for (slots, budget) in held {
            if let Some(b) = budget {
                b.set_max(queue);
            }
            if let Some(s) = slots {
                s.set_limit(limit);
            }
        }
    }

    /// An evicted key's unreported hits go to the next report (peered).
    /// Runs under the shard's lock (`shard`).
    pub(super) fn carry(&self, shard: usize, st: &mut Keyed<W>) {
        if let Some(p) = &self.peered {
            p.carry(shard, st);
        }
    }
}

impl<W: Waiter> Default for Keyed<W> {
    fn default() -> Self {
        Keyed {
            tat: 0,
            queues: None,
        }
    }
}

impl<W: Waiter> Keyed<W> {
    pub(super) fn queues(&mut self) -> &mut KeyQueues<W> {
        self.queues.get_or_insert_with(|| {
            Box::new(KeyQueues {
                slots: None,
                budget: None,
                peer: None,
                locked_until: 0,
                blocked_until: 0,
            })
        })
    }

    pub(super) fn slots(&mut self, limit: u32) -> Arc<Slots<W>> {
        self.queues()
            .slots
            .get_or_insert_with(|| Slots::new(limit))
            .clone()
    }

    /// A queue place of this key; none (and nothing allocated) with `--queue=0`.
    pub(super) fn place(&mut self, queue: u32) -> Option<BudgetToken> {
        if queue == 0 {
            return None;
        }
        self.queues()
            .budget
            .get_or_insert_with(|| Budget::new(queue))
            .try_take()
    }
}

impl<W: Waiter> KeyState for Keyed<W> {
    const USES_TIME: bool = true;

    /// Holds slots or waiters, or a request is between deciding and taking
    /// them (it holds a clone, taken under the key's lock): forgetting the
    /// key would lose them.
    fn busy(&self, _now: Nanos) -> bool {
        self.queues.as_ref().is_some_and(|q| {
            q.slots
                .as_ref()
                .is_some_and(|s| Arc::strong_count(s) > 1 || s.waiting() > 0)
                || q.budget.as_ref().is_some_and(|b| Arc::strong_count(b) > 1)
        })
    }

    /// Peered, in debt, locked out by `--count-status` charges or blocked
    /// (`--block`): kept while an idle key can go instead (a peered key's
    /// unreported hits do not keep it: they are carried, see `peered.rs`).
    fn sticky(&self, now: Nanos) -> bool {
        self.queues.as_ref().is_some_and(|q| {
            q.peer.as_ref().is_some_and(|p| p.sticky(now))
                || q.locked_until > now
                || q.blocked_until > now
        })
    }
}
