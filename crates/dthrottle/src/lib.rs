//! DThrottle's pure core: one leaky bucket per throttling tag, corrected by
//! the hits other instances report.
//!
//! Each instance decides locally ([`Buckets::decide`]): a request takes a
//! token from its tag's bucket (`burst` tokens, refilled at `rate` per
//! second) or is refused when none is left. Every period the instance sends
//! its peers the tags it served since its last report ([`Buckets::report`]),
//! and subtracts one token for every hit a peer reports
//! ([`Buckets::apply_peer`]). Those subtractions may take a bucket below
//! zero: that debt is what brings the fleet's long-run rate back to `rate`.
//!
//! With N instances, report period P and network delay d, a client gets at
//! most `b + 1 + rT + (N−1)(b + 1 + r(P+d))` requests over any window T; the
//! overshoot does not grow with T. Lost reports only forget debt, so the
//! limit degrades towards N independent buckets (N·r), never below r.
//!
//! **Bounded table, and floods.** At most `max_tags` tags are held. Tags
//! with unreported hits are evicted like idle ones (S3-FIFO order: a flood
//! of one-off tags evicts other one-off tags); their hits wait for the next
//! report in a bounded buffer per shard ([`evicted`]). Tags in debt are
//! sticky ([`debt::in_debt`]): evicted only when eviction found no idle tag
//! among those it looked at. No tag is ever busy, and the table refuses a
//! new key only when every key it looked at is busy: so no number of
//! distinct tags, nor of tags put in debt, can make it refuse a new tag, and
//! a flood costs O(1) amortized per decision (`crates/keyed`).
//!
//! Pure Rust: no TS API, no I/O; time comes from an injected [`Clock`].
//! Thread-safe: every method takes `&self`, and a call locks one shard of
//! the tag table.

#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use keyed::{KeyState, KeyTable};
use limits::{Clock, GcraParams, MonotonicClock, Nanos, Reservation};
use sha2::{Digest, Sha256};

pub use evicted::{EvictedHits, ShardedEvictedHits};

pub mod debt;
pub mod evicted;
#[cfg(test)]
mod tests;

pub use debt::MAX_PEER_DEBT;

/// Longest tag kept and sent as is (the wire format's one-byte length).
/// Longer tags are replaced by [`long_tag`], which every instance computes
/// the same way.
pub const MAX_TAG_LEN: usize = 255;

/// `--peer-max-senders` (rate_limit.so and dthrottled): the default and
/// largest number of peer processes whose replay windows a receiver
/// (`peer::Receiver`) keeps. Here, not in `peer`, so the option parsers
/// need no socket crate.
pub const DEFAULT_MAX_SENDERS: usize = 1024;
pub const MAX_MAX_SENDERS: usize = 65_536;

/// A bucket's parameters and the table's bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Tokens a full bucket holds: requests a new client may make at once.
    pub burst: u32,
    /// Tokens added per second (may be fractional, > 0).
    pub rate: f64,
    /// Most tags held at once (the keyed table's bound).
    pub max_tags: usize,
    /// Most tags in one report; above it the heaviest are kept and the rest
    /// counted as dropped.
    pub max_report_tags: usize,
}

/// The answer to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve: a token was taken.
    Ok,
    /// Throttle: the bucket has less than one token.
    No,
    /// The tag is not held and there is no room for it. Only with
    /// `max_tags = 0`: no tag is ever busy (tags with unreported hits or in
    /// debt make room for new ones), and the table refuses a new key only
    /// when every key it looked at is busy. Nothing was taken; the caller
    /// applies its policy (the daemon refuses by default).
    Full,
}

/// The hits served since the last report, heaviest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// `(tag, hits)`, by hits descending (ties by tag), at most
    /// `max_report_tags` of them.
    pub entries: Vec<(Box<[u8]>, u32)>,
    /// Tags with hits left out because of `max_report_tags`.
    pub dropped_tags: u64,
    /// Their hits (peers never learn of them).
    pub dropped_hits: u64,
}

/// Counters of rare events (the hot path counts nothing shared: callers
/// count their own decisions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tags held now.
    pub tags: u64,
    /// Tags evicted to make room.
    pub evicted: u64,
    /// Decisions answered [`Decision::Full`].
    pub full: u64,
    /// Peer hits subtracted from buckets.
    pub peer_hits_applied: u64,
    /// Peer hits for a tag there was no room for.
    pub peer_hits_dropped: u64,
    /// Tags left out of reports (`max_report_tags`, or the evicted tags'
    /// buffer was full), since start.
    pub report_dropped_tags: u64,
    /// Evicted tags whose unreported hits were dropped because the buffer
    /// that carries them to the next report was full (also counted in
    /// `report_dropped_tags` when that report is made).
    pub evicted_hits_dropped: u64,
}

/// One tag's state: its bucket's theoretical arrival time (GCRA; 0 is a
/// full bucket), local hits not yet reported, and the tag itself (peers
/// need the bytes: table keys are seeded hashes, different per instance).
#[derive(Default)]
struct TagState {
    tat: Nanos,
    /// Until when the bucket is below zero (debt); 0: never was.
    debt_until: Nanos,
    hits: u32,
    tag: Box<[u8]>,
}

impl TagState {
    fn name(&mut self, tag: &[u8]) {
        if self.tag.is_empty() {
            self.tag = tag.into();
        }
    }

    fn set_tat(&mut self, tat: Nanos, params: &GcraParams) {
        self.tat = tat;
        self.debt_until = debt::debt_until(tat, params);
    }
}

/// Never busy (the trait's default): nothing is lost with a tag, its
/// unreported hits are carried over (`Buckets::carry`).
impl KeyState for TagState {
    const USES_TIME: bool = true;

    /// Forgetting debt would hand the client a fresh burst: kept while an
    /// idle tag can go instead (see [`debt::in_debt`]).
    fn sticky(&self, now: Nanos) -> bool {
        debt::in_debt(self.debt_until, now)
    }
}

/// The tag table and bucket parameters of one limiter (one daemon, or one
/// rate_limit rule or group).
pub struct Buckets<C: Clock = MonotonicClock> {
    params: GcraParams,
    table: KeyTable<TagState>,
    max_report_tags: usize,
    clock: C,
    full: AtomicU64,
    peer_hits_applied: AtomicU64,
    peer_hits_dropped: AtomicU64,
    report_dropped_tags: AtomicU64,
    /// Hits of tags evicted since the last report, per shard of `table`.
    evicted: ShardedEvictedHits,
}

/// The tag as kept and sent: itself, or for tags over [`MAX_TAG_LEN`]
/// bytes `sha256:` and the hex SHA-256 of the tag (71 bytes).
pub fn long_tag(tag: &[u8]) -> Cow<'_, [u8]> {
    if tag.len() <= MAX_TAG_LEN {
        return Cow::Borrowed(tag);
    }
    let digest = Sha256::digest(tag);
    let mut out = Vec::with_capacity(7 + 64);
    out.extend_from_slice(b"sha256:");
    for b in digest {
        out.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    Cow::Owned(out)
}

impl Buckets<MonotonicClock> {
    pub fn new(config: Config) -> Self {
        Buckets::with_clock(config, MonotonicClock)
    }
}

impl<C: Clock> Buckets<C> {
    pub fn with_clock(config: Config, clock: C) -> Self {
        let table = KeyTable::new(config.max_tags);
        let evicted = ShardedEvictedHits::new(config.max_report_tags, table.shards());
        Buckets {
            params: GcraParams::per_second(config.rate, config.burst),
            table,
            max_report_tags: config.max_report_tags,
            clock,
            full: AtomicU64::new(0),
            peer_hits_applied: AtomicU64::new(0),
            peer_hits_dropped: AtomicU64::new(0),
            report_dropped_tags: AtomicU64::new(0),
            evicted,
        }
    }

    /// An evicted tag's unreported hits go to the next report, in the
    /// buffer of its shard. Runs under that shard's lock; a buffer's lock is
    /// only ever taken inside its shard's or alone, never the other way round.
    fn carry(&self, shard: usize, s: &mut TagState) {
        if s.hits > 0 {
            let tag = std::mem::take(&mut s.tag);
            self.evicted.push(shard, tag, s.hits);
        }
    }

    /// Runs `f` on `tag`'s state at the current time, making room for a new
    /// tag by evicting one (whose unreported hits are carried); `Err` if
    /// every tag looked at is busy. The one way `decide` and `apply_peer`
    /// reach a tag.
    fn with_tag<R>(
        &self,
        tag: &[u8],
        f: impl FnOnce(&mut TagState, Nanos, &GcraParams) -> R,
    ) -> Result<R, keyed::Full> {
        let tag = long_tag(tag);
        let key = self.table.hash(&tag);
        let now = self.clock.now();
        self.table.with_evicted_at(
            key,
            now,
            |s| {
                s.name(&tag);
                f(s, now, &self.params)
            },
            |s| self.carry(self.table.shard_index(key), s),
        )
    }

    /// Serve or throttle one request of `tag`; a served request counts as a
    /// hit in the next report.
    pub fn decide(&self, tag: &[u8]) -> Decision {
        let r = self.with_tag(tag, |s, now, params| {
            match params.reserve(s.tat, now, None) {
                (Reservation::Now, next) => {
                    s.set_tat(next, params);
                    s.hits = s.hits.saturating_add(1);
                    Decision::Ok
                }
                _ => Decision::No,
            }
        });
        r.unwrap_or_else(|_| {
            self.full.fetch_add(1, Ordering::Relaxed);
            Decision::Full
        })
    }

    /// Subtracts `hits` tokens that a peer served for `tag` (the bucket may
    /// go below zero, down to [`MAX_PEER_DEBT`]). Returns false if there was
    /// no room for the tag.
    pub fn apply_peer(&self, tag: &[u8], hits: u32) -> bool {
        if hits == 0 {
            return true;
        }
        let r = self.with_tag(tag, |s, now, params| {
            s.set_tat(debt::apply_hits(s.tat, now, hits, params), params);
        });
        let counter = match r {
            Ok(()) => &self.peer_hits_applied,
            Err(_) => &self.peer_hits_dropped,
        };
        counter.fetch_add(u64::from(hits), Ordering::Relaxed);
        r.is_ok()
    }

    /// The hits served since the last report (by tags held, and by tags
    /// evicted meanwhile), and resets them. Visits every tag held (one
    /// shard lock at a time): call it once per period.
    pub fn report(&self) -> Report {
        let mut entries: Vec<(Box<[u8]>, u32)> = Vec::new();
        // Taken under the shard's lock: hits served after stay for the next.
        self.table.for_each_mut(|_, s| {
            if s.hits > 0 {
                entries.push((s.tag.clone(), std::mem::take(&mut s.hits)));
            }
        });
        // After the table: a tag evicted during the visit carried its hits
        // here, whether or not the visit had seen its shard yet.
        let carried = self.evicted.take();
        entries.extend(carried.entries);
        let mut report = debt::report(entries, self.max_report_tags);
        report.dropped_tags += carried.dropped_tags;
        report.dropped_hits += carried.dropped_hits;
        self.report_dropped_tags
            .fetch_add(report.dropped_tags, Ordering::Relaxed);
        report
    }

    /// Tokens in `tag`'s bucket now (negative: debt); `None` if the tag is
    /// not held (its bucket is full). For status output and tests.
    pub fn level(&self, tag: &[u8]) -> Option<f64> {
        let tag = long_tag(tag);
        let now = self.clock.now();
        let params = &self.params;
        self.table
            .get(self.table.hash(&tag), |s| debt::level(s.tat, now, params))
    }

    pub fn stats(&self) -> Stats {
        Stats {
            tags: self.table.len() as u64,
            evicted: self.table.evicted(),
            full: self.full.load(Ordering::Relaxed),
            peer_hits_applied: self.peer_hits_applied.load(Ordering::Relaxed),
            peer_hits_dropped: self.peer_hits_dropped.load(Ordering::Relaxed),
            report_dropped_tags: self.report_dropped_tags.load(Ordering::Relaxed),
            evicted_hits_dropped: self.evicted.dropped_total(),
        }
    }

    pub fn clock(&self) -> &C {
        &self.clock
    }
}
