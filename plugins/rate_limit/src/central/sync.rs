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

use ats::poller::Poller;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ats::sched::{Periodic, Pool};
use ats::stats::Stat;
use parking_lot::Mutex;
use rate_limit_core::Limiter;
// `::store`: the store client crate (the parent module shares its name).
use store::redis::{key_base, Op, Reply};
use store::{Answer, Clients};

use super::{Store, StoreMetrics, Token};
use crate::queue::Queued;

/// Most keys exchanged per period; the heaviest first.
pub(crate) const MAX_KEYS_PER_SYNC: usize = 4096;
/// Most keys remembered (own hits of the last periods); beyond it the
/// stalest are forgotten.
const MAX_REMEMBERED: usize = 200_000;

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
    limiter: Weak<Limiter<Queued>>,
    limiter_id: u64,
    metrics: StoreMetrics,
    /// `plugin.rate_limiter.peer_tags_dropped` (shared with `--peers`):
    /// keys with hits a sync left out (beyond [`MAX_KEYS_PER_SYNC`], or
    /// evicted while the evicted keys' buffer was full).
    tags_dropped: Option<Stat>,
    keys: Mutex<HashMap<Box<[u8]>, KeySync>>,
    /// Stopped when the syncer is dropped.
    _task: Option<Periodic>,
}

/// A key's own hits in the three latest periods (by the server's period
/// number), and the last period whose total was applied.
#[derive(Default)]
struct KeySync {
    own: [(u64, u64); 3],
    applied: u64,
}

/// The live syncers, for rules of the same limiter and settings to share
/// one. Weak: only rules (and exchanges in flight) keep a syncer.
static SYNCERS: Clients<Syncer> = Clients::new();

/// The exchange of `limiter` with these settings: the live one, or a new
/// one started here.
pub(super) fn join(
    store: &Arc<Store>,
    limiter: &Arc<Limiter<Queued>>,
    namespace: &str,
    period_ms: u64,
    metrics: StoreMetrics,
) -> Result<Arc<Syncer>, String> {
    let id = limiter.id();
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
                limiter: Arc::downgrade(limiter),
                limiter_id: id,
                metrics,
                tags_dropped: Stat::find_or_create(&format!(
                    "{}.peer_tags_dropped",
                    rate_limit_core::options::DEFAULT_PREFIX
                ))
                .map_err(|e| log::error!("{e}"))
                .ok(),
                keys: Mutex::new(HashMap::new()),
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
        let report = limiter.peer_report(MAX_KEYS_PER_SYNC);
        super::bump(
            self.tags_dropped,
            i64::try_from(report.dropped_tags).unwrap_or(i64::MAX),
        );
        let mut submitted = false;
        for (tag, hits) in report.entries {
            let op = Op::Sync {
                base: key_base(&self.namespace, Some(&tag)),
                period_ms: self.period_ms,
                hits,
            };
            let token = Token::Sync(self.clone(), tag, hits);
            match self.store.client.submit(op, token, self.store.timeout) {
                Ok(()) => submitted = true,
                Err(_) => super::bump(self.metrics.errors, 1),
            }
        }
        if submitted {
            Poller::arm(&self.store);
        }
    }

    /// A key's exchange came back (on the drainer's thread).
    pub(super) fn completed(&self, tag: Box<[u8]>, hits: u32, answer: Answer<Reply>) {
        let (period, previous) = match answer {
            Answer::Reply(Reply::Synced { period, previous }) => (period, previous),
            Answer::Reply(_) | Answer::Error(_) => return super::bump(self.metrics.errors, 1),
            Answer::Timeout => return super::bump(self.metrics.timeouts, 1),
        };
        super::bump(self.metrics.decisions, 1);
        let others = {
            let mut keys = self.keys.lock();
            if keys.len() >= MAX_REMEMBERED && !keys.contains_key(&tag) {
                // Forget the keys not synced in the last two periods.
                keys.retain(|_, k| k.own[0].0 + 2 >= period);
            }
            let k = keys.entry(tag.clone()).or_default();
            k.record(period, u64::from(hits));
            k.learn(period, previous)
        };
        if let (Some(n), Some(l)) = (others, self.limiter.upgrade()) {
            l.apply_peer(&tag, u32::try_from(n).unwrap_or(u32::MAX));
        }
    }
}

impl KeySync {
    fn record(&mut self, period: u64, hits: u64) {
        if let Some(o) = self.own.iter_mut().find(|(p, _)| *p == period) {
            o.1 += hits;
        } else if period > self.own[0].0 {
            self.own.rotate_right(1);
            self.own[0] = (period, hits);
        }
    }

    /// The others' hits of the two periods before `period` (totals in
    /// `previous`, the last first) not applied yet: each period once.
    fn learn(&mut self, period: u64, previous: [u64; 2]) -> Option<u64> {
        let mut others = 0;
        for (back, total) in [(2, previous[1]), (1, previous[0])] {
            let Some(q) = period.checked_sub(back) else {
                continue;
            };
            if q <= self.applied {
                continue;
            }
            self.applied = q;
            let own = self
                .own
                .iter()
                .find(|(p, _)| *p == q)
                .map_or(0, |(_, h)| *h);
            others += total.saturating_sub(own);
        }
        Some(others).filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::KeySync;

    #[test]
    fn others_hits_are_the_totals_less_our_own_once_per_period() {
        let mut k = KeySync::default();
        k.record(100, 5);
        // Periods 98 and 99: all others'.
        assert_eq!(k.learn(100, [40, 7]), Some(47));
        k.record(100, 3);
        assert_eq!(k.learn(100, [40, 7]), None, "applied already");
        k.record(101, 2);
        // Period 100's total 20 includes our 8.
        assert_eq!(k.learn(101, [20, 40]), Some(12));
        assert_eq!(k.learn(101, [20, 40]), None);
        // A skipped period: 102 and 103 learned together at 104.
        k.record(102, 1);
        k.record(104, 1);
        assert_eq!(k.learn(104, [30, 11]), Some(40));
        // Only ours.
        k.record(105, 4);
        assert_eq!(k.learn(106, [4, 1]), None, "nothing from others");
    }
}
