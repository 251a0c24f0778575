//! The hybrid mode (`--store-sync=MS`): requests are decided locally, on a
//! peered limiter (the same arithmetic as DThrottle's peer exchange: other
//! proxies' hits advance a key's GCRA arrival time, debt included), and
//! every MS this proxy exchanges counts with the others through Redis.
//!
//! Each period, for each client key served here since the last one, the
//! key's hits go to Redis (`SYNC`: `INCRBY` on the key's counter for the
//! current period of the server's clock), which answers with the previous
//! period's total over all proxies. Minus this proxy's own hits of that
//! period, that is the others' hits, applied to the local bucket once per
//! period. So others' hits arrive at most about two periods late, and the
//! overshoot over the global rate is bounded by what the other proxies can
//! admit in that time (gubernator's GLOBAL behaviour, on Redis).
//!
//! A key not served here is not synced: its bucket learns the others'
//! traffic with its first sync after it is served again (the previous
//! period's total). Store errors drop that period's exchange for the key
//! (counted in `store_errors`/`store_timeouts`): the limits stay local.
//!
//! Blocks (`--block`) started here are stored in Redis (`Op::Block`, a key
//! expiring with the block) at the next period; each sync of a key tells
//! its block's time left, so another proxy blocks the client from its next
//! sync of the key (at most one period after it served the client).

use std::sync::{Arc, Weak};
use std::time::Duration;

use ats::poller::Poller;
use ats::sched::{Periodic, Pool};
use ats::stats::Stat;
use parking_lot::Mutex;
use rate_limit_core::peering::exchange::Member;
use rate_limit_core::store::ledger::{Ledger, MAX_KEYS_PER_SYNC};
use store::redis::{key_base, Op, Reply};
use store::{Answer, Clients};

use super::rule_store::{Store, StoreMetrics, Token};
use crate::metrics::bump;

/// One per limiter and store settings, held by the rules that use it (a
/// group's rules share it) and by its exchanges in flight: it stops with
/// the last of them. A reload that keeps the settings hands it on to the
/// new rules; one that changes `--store`, `--store-timeout`, `--store-sync`
/// or the namespace gets a new limiter (the registry's shape rule) and so a
/// new syncer, and the old one stops with the old rules. A refused reload
/// deletes its new rules, and with them their syncer: the old rules keep
/// theirs.
pub(crate) struct Syncer {
    store: Arc<Store>,
    namespace: String,
    period_ms: u64,
    limiter: Weak<dyn Member>,
    limiter_id: u64,
    metrics: StoreMetrics,
    /// `plugin.rate_limiter.peer_tags_dropped` (shared with `--peers`):
    /// keys with hits a sync left out (beyond [`MAX_KEYS_PER_SYNC`], or
    /// evicted while the evicted keys' buffer was full).
    tags_dropped: Option<Stat>,
    /// Own hits per key, to tell the others' from the totals.
    ledger: Mutex<Ledger>,
    /// Stopped when the syncer is dropped.
    _task: Option<Periodic>,
}

/// The live syncers, for rules of the same limiter and settings to share
/// one. Weak: only rules (and exchanges in flight) keep a syncer.
static SYNCERS: Clients<Syncer> = Clients::new();

/// The exchange of `limiter` with these settings: the live one, or a new
/// one started here.
pub(super) fn join(
    store: &Arc<Store>,
    limiter_id: u64,
    limiter: Weak<dyn Member>,
    namespace: &str,
    period_ms: u64,
    metrics: StoreMetrics,
) -> Result<Arc<Syncer>, String> {
    let id = limiter_id;
    let same = |s: &Syncer| {
        s.limiter_id == id
            && Arc::ptr_eq(&s.store, store)
            && s.namespace == namespace
            && s.period_ms == period_ms
    };
    SYNCERS.get_or_start(same, || {
        let mut started = Ok(());
        let s = Arc::new_cyclic(|weak: &Weak<Syncer>| {
            let weak = weak.clone();
            // On the net pool: see `Store::arm`.
            let task = Periodic::start(Duration::from_millis(period_ms), Pool::Net, move || {
                if let Some(s) = weak.upgrade() {
                    s.tick();
                }
            });
            Syncer {
                store: store.clone(),
                namespace: namespace.to_owned(),
                period_ms,
                limiter,
                limiter_id: id,
                metrics,
                tags_dropped: Stat::find_or_create(&format!(
                    "{}.peer_tags_dropped",
                    rate_limit_core::options::DEFAULT_PREFIX
                ))
                .map_err(|e| log::error!("{e}"))
                .ok(),
                ledger: Mutex::default(),
                _task: task.map_err(|e| started = Err(e)).ok(),
            }
        });
        started?;
        Ok(s)
    })
}

/// How many exchanges still run (held by transactions in flight).
pub(crate) fn running() -> usize {
    SYNCERS.live()
}

impl Syncer {
    /// Every period, on a net thread: sends the hits served here.
    fn tick(self: &Arc<Self>) {
        let Some(limiter) = self.limiter.upgrade() else {
            return;
        };
        self.store.start_waker();
        let report = limiter.report(MAX_KEYS_PER_SYNC);
        bump(
            self.tags_dropped,
            i64::try_from(report.dropped_tags).unwrap_or(i64::MAX),
        );
        let mut submitted = false;
        let (blocks, dropped) = limiter.blocks();
        bump(
            self.tags_dropped,
            i64::try_from(dropped).unwrap_or(i64::MAX),
        );
        for (tag, ms) in blocks {
            let op = Op::Block {
                base: key_base(&self.namespace, Some(&tag)),
                ms: u64::from(ms),
            };
            match self
                .store
                .client
                .submit(op, Token::Block(self.metrics), self.store.timeout)
            {
                Ok(()) => submitted = true,
                Err(_) => bump(self.metrics.errors, 1),
            }
        }
        for (tag, hits) in report.entries {
            let op = Op::Sync {
                base: key_base(&self.namespace, Some(&tag)),
                period_ms: self.period_ms,
                hits,
            };
            let token = Token::Sync(self.clone(), tag, hits);
            match self.store.client.submit(op, token, self.store.timeout) {
                Ok(()) => submitted = true,
                Err(_) => bump(self.metrics.errors, 1),
            }
        }
        if submitted {
            Poller::arm(&self.store);
        }
    }

    /// A key's exchange came back (on the drainer's thread).
    pub(super) fn completed(&self, tag: Box<[u8]>, hits: u32, answer: Answer<Reply>) {
        let (period, previous, blocked_ms) = match answer {
            Answer::Reply(Reply::Synced {
                period,
                previous,
                blocked_ms,
            }) => (period, previous, blocked_ms),
            Answer::Reply(_) | Answer::Error(_) => return bump(self.metrics.errors, 1),
            Answer::Timeout => return bump(self.metrics.timeouts, 1),
        };
        bump(self.metrics.decisions, 1);
        let others = self.ledger.lock().synced(&tag, hits, period, previous);
        let Some(l) = self.limiter.upgrade() else {
            return;
        };
        if let Some(n) = others {
            l.apply(&tag, u32::try_from(n).unwrap_or(u32::MAX));
        }
        if blocked_ms > 0 {
            // Another proxy's block (or ours, which it does not shorten).
            l.apply_block(&tag, u32::try_from(blocked_ms).unwrap_or(u32::MAX));
        }
    }
}
