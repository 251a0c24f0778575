//! A peered keyed scope: a keyed limiter in DThrottle's peer exchange
//! (`--peers`, issue 13), whose buckets take debt from peers' hits. What
//! it adds to the keyed state (a key's `PeerKey`, the scope's `Peered`) is
//! declared in `key_scope.rs`, which holds it; here is how it is worked.
//!
//! **How a peer's hits reach a key.** A keyed limiter's bucket is GCRA: one
//! theoretical arrival time (TAT) per key. `h` hits served by a peer advance
//! the key's TAT by `h` emission intervals (from `now` if the bucket had
//! refilled), exactly as `h` local requests would. A TAT beyond
//! `now + burst·interval` is a bucket below zero: that is DThrottle's debt,
//! and it needs no new state. The arithmetic (hits to TAT, the debt cap of
//! [`MAX_PEER_DEBT`], when a key is busy, the report's cut) is
//! `dthrottle::debt`, the one implementation the daemon's buckets use too,
//! so that crate's bound, convergence and lost-report tests cover it; the
//! admission core stays one (waits, slots, refunds, live rate changes and
//! RateLimit fields work unchanged on peered rules), and the request path
//! only adds a hit count.
//!
//! **Identity.** Peers must name a key the same way, and our table's hashes
//! are seeded randomly per limiter, so reports carry the key's peer tag
//! (`crate::peering::to_peer_tag`): its text for one-source keys (what
//! `dthrottled` clients send), bounded to 255 bytes. A peered limiter's
//! table is keyed by the hash of that tag, so a received tag finds its key
//! with one lookup.
//!
//! **Eviction** (issue 21), as in `crates/dthrottle`. A key with unreported
//! hits is evicted like an idle one (S3-FIFO order), and its tag and hits
//! go to a bounded buffer that the next report drains
//! (`dthrottle::evicted`: the heaviest `--peer-max-tags` are kept, the rest
//! counted in `peer_tags_dropped`): were such keys kept, ≥ `--keys` distinct
//! client-chosen keys within one `--peer-period` would fill the table and
//! refuse every new client until the next report. A key in debt is sticky:
//! kept while eviction finds an idle key, evicted rather than refuse a new key
//! (forgetting it hands one client that was over its rate a fresh burst;
//! never evicting it would let clients that get keys into debt lock new
//! clients out, see `dthrottle::debt::in_debt`). Keys holding slots or
//! waiters stay busy.

pub use dthrottle::MAX_PEER_DEBT;
use dthrottle::{debt, Report};
use keyed::KeyTable;
use limits::{Clock, GcraParams, Nanos, Waiter};

use super::bounds::Limits;
use super::key_scope::{Keyed, KeyedScope, NewBlocks, PeerKey, Peered};
use super::limiter::{Limiter, Scope};

impl PeerKey {
    /// In debt at `now` (the time of the table call that evicts).
    pub(super) fn sticky(&self, now: Nanos) -> bool {
        debt::in_debt(self.debt_until, now)
    }
}

impl<W: Waiter> Keyed<W> {
    fn peer(&mut self, tag: &[u8], params: &GcraParams) -> &mut PeerKey {
        let debt_until = debt::debt_until(self.tat, params);
        let p = self.queues().peer.get_or_insert_with(|| PeerKey {
            tag: tag.into(),
            hits: 0,
            debt_until: 0,
        });
        p.debt_until = debt_until;
        p
    }

    /// A token was taken here for a request of `tag`.
    pub(super) fn hit(&mut self, tag: &[u8], params: &GcraParams) {
        let p = self.peer(tag, params);
        p.hits = p.hits.saturating_add(1);
    }

    /// A request of `tag` passed the check (`--count-status`): keeps the
    /// tag, so that its response's charge is reported under it.
    pub(super) fn note_tag(&mut self, tag: &[u8], params: &GcraParams) {
        self.peer(tag, params);
    }

    /// A response charged the bucket (`--count-status`): one hit for the
    /// next report, if the key's tag is known (a key evicted between the
    /// request and its response is charged here only).
    pub(super) fn charged(&mut self, params: &GcraParams) {
        let debt_until = debt::debt_until(self.tat, params);
        if let Some(p) = self.queues.as_mut().and_then(|q| q.peer.as_mut()) {
            p.debt_until = debt_until;
            p.hits = p.hits.saturating_add(1);
        }
    }

    /// A token was given back: the hit is not reported (if it already was,
    /// peers keep one hit too many, which errs towards limiting).
    pub(super) fn unhit(&mut self) {
        if let Some(p) = self.queues.as_mut().and_then(|q| q.peer.as_mut()) {
            p.hits = p.hits.saturating_sub(1);
        }
    }
}

impl Peered {
    /// A block of `tag` until `until` started here: for the next report
    /// (blocks received from peers are not passed on, so none echoes).
    pub(super) fn block_started(&self, tag: &[u8], until: Nanos) {
        if tag.is_empty() {
            // Requests without a key (`--key-missing=shared`) are never exchanged.
            return;
        }
        let mut b = self.blocks.lock();
        if b.list.len() < b.max {
            b.list.push((tag.into(), until));
        } else {
            b.dropped += 1;
        }
    }

    /// An evicted key's unreported hits go to the next report, in the
    /// buffer of its shard (`shard`). Runs under that shard's lock; a
    /// buffer's lock is only ever taken inside its shard's or alone, never
    /// the other way round.
    pub(super) fn carry<W: Waiter>(&self, shard: usize, st: &mut Keyed<W>) {
        let Some(p) = st.queues.as_mut().and_then(|q| q.peer.as_mut()) else {
            return;
        };
        if p.hits > 0 {
            let tag = std::mem::take(&mut p.tag);
            self.evicted_hits.push(shard, tag, p.hits);
        }
    }
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// A keyed limiter that joins the peer exchange: its table is keyed by
    /// peer tags ([`KeyedLimiter::admit`](super::KeyedLimiter::admit)), and it reports and takes hits.
    /// `report_tags`: the most tags its reports carry (`--peer-max-tags`),
    /// which also bounds the evicted keys' hits kept for the next report.
    pub fn peered(
        limits: Limits,
        keys: usize,
        report_tags: usize,
        clock: C,
    ) -> std::sync::Arc<Self> {
        let table = KeyTable::new(keys);
        let peered = Peered {
            evicted_hits: dthrottle::ShardedEvictedHits::new(report_tags, table.shards()),
            blocks: parking_lot::Mutex::new(NewBlocks {
                list: Vec::new(),
                max: report_tags,
                dropped: 0,
            }),
        };
        let scope = KeyedScope::new(limits, table, Some(peered));
        std::sync::Arc::new(Limiter::with_scope(limits, clock, Scope::Keyed(scope)))
    }

    /// The peered keyed scope, if this limiter is one.
    #[inline]
    fn peered_scope(&self) -> Option<(&KeyedScope<W>, &Peered)> {
        match &self.scope {
            Scope::Keyed(k) => Some((k, k.peered.as_ref()?)),
            Scope::Rule(_) => None,
        }
    }

    #[inline]
    pub fn is_peered(&self) -> bool {
        self.peered_scope().is_some()
    }

    /// Takes `hits` tokens from `tag`'s bucket, served by a peer (the bucket
    /// may go below zero, down to [`MAX_PEER_DEBT`]). A tag not held is
    /// added. False if nothing was applied: not a peered rate limiter, no
    /// hits, or no room for the tag (every key of its shard is busy).
    pub fn apply_peer(&self, tag: &[u8], hits: u32) -> bool {
        let Some((scope, peered)) = self.peered_scope() else {
            return false;
        };
        let Some(params) = scope.params() else {
            return false;
        };
        if hits == 0 || tag.is_empty() {
            return false;
        }
        let now = self.clock.now();
        Self::with_peer_key(scope, peered, tag, now, |st| {
            st.tat = debt::apply_hits(st.tat, now, hits, &params);
            st.peer(tag, &params);
        })
    }

    /// Runs `f` on the key of `tag` in a peered scope, adding it if it is
    /// not held (an evicted key's hits carried to the next report); false
    /// if there was no room for it.
    fn with_peer_key(
        scope: &KeyedScope<W>,
        peered: &Peered,
        tag: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Keyed<W>),
    ) -> bool {
        let table = &scope.table;
        let key = table.hash(tag);
        table
            .with_evicted_at(key, now, f, |st| peered.carry(table.shard_index(key), st))
            .is_ok()
    }

    /// The hits served here since the last report (by keys held, and by
    /// keys evicted meanwhile), heaviest first, at most `max_tags` of them
    /// (the rest counted as dropped), and resets them. Visits every key
    /// (one shard lock at a time): once per period.
    pub fn peer_report(&self, max_tags: usize) -> Report {
        let Some((scope, peered)) = self.peered_scope() else {
            return Report::default();
        };
        let table = &scope.table;
        let mut entries: Vec<(Box<[u8]>, u32)> = Vec::new();
        // Taken under the shard's lock: hits served after stay for the next.
        // Hits of requests without a key (`--key-missing=shared`, empty
        // tag) are never exchanged; left out before the cap, so they never
        // push a real tag out.
        table.for_each_mut(|_, st| {
            if let Some(p) = st.queues.as_mut().and_then(|q| q.peer.as_mut()) {
                let hits = std::mem::take(&mut p.hits);
                if hits > 0 && !p.tag.is_empty() {
                    entries.push((p.tag.clone(), hits));
                }
            }
        });
        // After the table: a key evicted during the visit carried its hits
        // here, whether or not the visit had seen its shard yet.
        let carried = peered.evicted_hits.take();
        entries.extend(carried.entries);
        let mut report = debt::report(entries, max_tags);
        report.dropped_tags += carried.dropped_tags;
        report.dropped_hits += carried.dropped_hits;
        report
    }

    /// The blocks started here since the last call, each its tag and the
    /// milliseconds it still holds (those over by now left out), and how
    /// many the bound dropped: the next report of blocks.
    pub fn peer_blocks(&self) -> (Vec<peer::Entry>, u64) {
        let Some((_, peered)) = self.peered_scope() else {
            return (Vec::new(), 0);
        };
        let (list, dropped) = {
            let mut b = peered.blocks.lock();
            (std::mem::take(&mut b.list), std::mem::take(&mut b.dropped))
        };
        let now = self.clock.now();
        let left = list
            .into_iter()
            .filter(|(_, until)| *until > now)
            .map(|(tag, until)| {
                let ms = (until - now).div_ceil(limits::NANOS_PER_MS);
                (tag, u32::try_from(ms).unwrap_or(u32::MAX))
            })
            .collect();
        (left, dropped)
    }

    /// A peer blocked `tag` for `ms` more milliseconds: it is refused here
    /// too until then (a longer block here stays), at most for the longest
    /// `--block` (a day: a peer, or Redis, holds no more power than an
    /// operator). A tag not held is added. False if not a peered limiter,
    /// or no room for the tag.
    pub fn apply_peer_block(&self, tag: &[u8], ms: u32) -> bool {
        let Some((scope, peered)) = self.peered_scope() else {
            return false;
        };
        if ms == 0 || tag.is_empty() {
            return false;
        }
        let now = self.clock.now();
        let ms = u64::from(ms).min(crate::options::MAX_BLOCK_SECONDS * 1000);
        let until = now.saturating_add(ms * limits::NANOS_PER_MS);
        Self::with_peer_key(scope, peered, tag, now, |st| {
            if st.block_ends(now).is_none_or(|held| held < until) {
                st.block_until(until);
            }
        })
    }

    /// Blocks the peered key of `tag` for `length` from now (the `block`
    /// command), and reports it to the peers. False if not a peered
    /// limiter, or no room for the tag.
    pub fn block_peer(&self, tag: &[u8], length: Nanos) -> bool {
        let Some((scope, peered)) = self.peered_scope() else {
            return false;
        };
        let until = self.clock.now().saturating_add(length);
        let blocked = self.block(Some(scope.table.hash(tag)), length);
        if blocked {
            peered.block_started(tag, until);
        }
        blocked
    }

    /// Tokens in `tag`'s bucket now (negative: debt); `None` if not held.
    pub fn peer_level(&self, tag: &[u8]) -> Option<f64> {
        let Scope::Keyed(scope) = &self.scope else {
            return None;
        };
        let (table, params) = (&scope.table, scope.params()?);
        let now = self.clock.now();
        table.get(table.hash(tag), |st| debt::level(st.tat, now, &params))
    }
}

#[cfg(test)]
mod tests;
