//! Bounded per-client state: a table of at most `capacity` keys, each with a
//! state `S`, shared by threads, that evicts only idle keys and resists scans.
//!
//! It is the layer under rate_limit's per-key limits, fair slots per flow,
//! ip_throttle's per-IP state machine and DThrottle's per-tag buckets
//! (issues 9, 11, 12, 13). Pure Rust: no TS API, no unsafe.
//!
//! - **Bound**: never more than `capacity` keys, whatever the traffic.
//! - **Busy keys stay**: a key whose [`KeyState::busy`] is true (slots held,
//!   waiters queued, a ban in force) is never evicted. When a key must be
//!   inserted and the keys of its shard that eviction looked at are all
//!   busy, [`KeyTable::with`] returns [`Full`] and the caller applies its
//!   policy (refuse, or an overflow key). A table whose keys are never busy
//!   never returns `Full` (unless its capacity is 0).
//! - **Sticky keys yield last**: a key whose [`KeyState::sticky`] is true
//!   (a bucket in debt) is kept while eviction finds an idle key to evict
//!   instead, but evicted rather than refuse a new key: clients that can make
//!   keys sticky cannot lock new clients out.
//! - **Nothing is lost silently**: [`KeyTable::with_evicted`] shows the
//!   caller each evicted key's state (unreported hits to carry over).
//! - **Floods cost O(1) amortized per insert**: eviction's search spends a
//!   scan credit earned per insert (16 keys), kept up to one pass over the
//!   shard, so no flood makes each insert sweep its shard. The price: in a
//!   shard of more than 16 keys, an idle key beyond the keys looked at may
//!   be found a few inserts late (`shard/evict.rs`).
//! - **Scan resistance**: eviction is S3-FIFO (see `shard.rs`): new keys go
//!   through a small probation queue, so a flood of one-off keys evicts other
//!   one-off keys, not the clients that keep coming back.
//! - **No global lock**: the table is split into shards, each behind its own
//!   mutex; a call locks one shard.
//!
//! # Sharding and the bound
//! The table has `clamp(capacity / 1024, 1, 64)` shards and shard *i* holds
//! at most `capacity / shards` keys, plus one for the first
//! `capacity % shards` shards: the shard bounds add up to `capacity`
//! exactly, so `len() <= capacity` always, and small tables (`--keys=10`)
//! are one shard holding all 10. Keys spread over shards at random, so with
//! several shards one of them can fill (and start evicting) while the table
//! as a whole holds a few percent fewer than `capacity` keys.
//!
//! # Memory
//! Per shard, an open-addressing table at most 2/3 full with each state
//! inline (a cell is `8 + size_of::<S>() + 1` bytes, rounded up to `S`'s
//! alignment), a probation queue of a tenth of the keys (8 bytes each) and a
//! ghost table of one 4-byte fingerprint per key: with a 16-byte state,
//! 1.5 x 32 + 0.8 + 4 = 53 bytes per key at the bound (measured: see
//! BENCHMARKS.md). The cell array starts at 16 cells and doubles up to the
//! bound as keys arrive; it never shrinks.

//! # Example
//! ```
//! use keyed::{Full, KeyState, KeyTable};
//!
//! #[derive(Default)]
//! struct Client {
//!     active: u32,
//! }
//!
//! impl KeyState for Client {
//!     fn busy(&self, _now: u64) -> bool {
//!         self.active > 0
//!     }
//! }
//!
//! let table = KeyTable::<Client>::new(10_000);
//! let key = table.hash(b"192.0.2.1");
//! // Admission: take a slot of this client, or apply the overflow policy.
//! match table.with(key, |c| c.active += 1) {
//!     Ok(()) => {}
//!     Err(Full) => { /* refuse, or use a shared overflow key */ }
//! }
//! // Release: never creates a key.
//! table.get(key, |c| c.active -= 1);
//! assert_eq!(table.len(), 1);
//! ```

#![forbid(unsafe_code)]

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

mod shard;
mod sip;

#[cfg(test)]
mod tests;

use shard::Shard;
use sip::Sip;

/// The state kept per key.
///
/// `now` in [`busy`](Self::busy) and [`sticky`](Self::sticky) is the time
/// the caller gave the table call that evicts ([`KeyTable::with_at`],
/// [`KeyTable::with_evicted_at`]), in the caller's clock and units; 0 from
/// [`KeyTable::with`] and [`KeyTable::with_evicted`]. The table never reads
/// a clock: states whose checks ignore time use the calls without one.
pub trait KeyState: Default + Send + 'static {
    /// True while the key holds something that must not be forgotten (slots
    /// held, waiters queued, a ban in force): the key is never evicted then.
    ///
    /// Called during eviction scans under the shard's lock: keep it cheap.
    /// It may change without the table being told (for example a ban that
    /// ends at a deadline): it is asked again at every scan. Default: never
    /// (a state that loses nothing when evicted, or only sticky).
    fn busy(&self, now: u64) -> bool {
        let _ = now;
        false
    }

    /// True while the key holds something better kept but not worth
    /// refusing a new key for (a bucket in debt: evicting it hands the
    /// client a fresh burst). Kept while eviction finds an idle key to evict
    /// instead; evicted when it finds none among the keys it looks at (see
    /// [`KeyTable::with`]). Same rules as
    /// [`busy`](Self::busy): cheap, asked again at every scan.
    fn sticky(&self, now: u64) -> bool {
        let _ = now;
        false
    }

    /// `busy` or `sticky` read `now`: such a table must be called with the
    /// time ([`KeyTable::with_at`], [`KeyTable::with_evicted_at`]); the
    /// calls without it pass 0, which would keep every key that was ever in
    /// debt (checked in debug builds).
    const USES_TIME: bool = false;
}

/// No room for a new key: its shard is at its bound and every key of it
/// that eviction looked at is busy (see [`KeyTable::with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("key table full: no key could be evicted")
    }
}

impl std::error::Error for Full {}

/// Fewest keys per shard before the table is split further: shards fill
/// unevenly, and the fewer keys a shard has, the larger the spread.
const MIN_KEYS_PER_SHARD: usize = 1024;
/// Enough that two (or a few dozen) threads rarely meet on one lock.
const MAX_SHARDS: usize = 64;

/// A shard and its counters, on cache lines of its own so that threads
/// working on neighbouring shards do not share a line. `repr(C)`: the lock
/// first, on the line of the shard's hot fields.
#[repr(C, align(128))]
struct Padded<S> {
    shard: Mutex<Shard<S>>,
    /// Copies of the shard's counters, readable without its lock.
    len: AtomicUsize,
    evicted: AtomicU64,
}

/// A random 128-bit SipHash key: std's `RandomState` holds one drawn from
/// the OS's random source (per thread, then varied per call), and does not
/// expose it; two of its outputs are as unpredictable as the key itself.
fn random_key() -> Sip {
    let s = RandomState::new();
    Sip::new(s.hash_one(0u64), s.hash_one(1u64))
}

/// A bounded table of per-key states, shared by threads.
pub struct KeyTable<S: KeyState> {
    shards: Box<[Padded<S>]>,
    capacity: usize,
    seed: Sip,
}

impl<S: KeyState> KeyTable<S> {
    /// A table that holds at most `capacity` keys (the `--keys` bound). With
    /// `capacity == 0` it holds none: every [`with`](Self::with) is `Full`.
    pub fn new(capacity: usize) -> Self {
        let shards = (capacity / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        Self::with_shards(capacity, shards)
    }

    /// `new` with a chosen shard count (tests: several shards at small
    /// capacities). `shards` is clamped to `1..=max(capacity, 1)`.
    pub(crate) fn with_shards(capacity: usize, shards: usize) -> Self {
        let n = shards.clamp(1, capacity.max(1));
        let shards = (0..n)
            .map(|i| Padded {
                shard: Mutex::new(Shard::new(capacity / n + usize::from(i < capacity % n))),
                len: AtomicUsize::new(0),
                evicted: AtomicU64::new(0),
            })
            .collect();
        KeyTable {
            shards,
            capacity,
            seed: random_key(),
        }
    }

    /// The key for `bytes` (an address, a header value, a tag, ...):
    /// SipHash-1-3 keyed with a random 128-bit key of this table (the PRF of
    /// std's `RandomState`, see `sip.rs`), so clients cannot craft keys
    /// that collide or that crowd one shard. Two byte strings with the same
    /// 64-bit hash share one state: at 1 M keys the chance that any two
    /// clients collide is about 3 in 100 million (birthday bound, 2^-64 per
    /// pair), and then both are limited as one client.
    pub fn hash(&self, bytes: &[u8]) -> u64 {
        self.seed.hash(bytes)
    }

    /// Runs `f` on `key`'s state, inserting a default state first if the key
    /// is absent. Inserting into a full shard evicts an idle key (S3-FIFO
    /// order), or failing that a sticky one; if none can go, nothing is
    /// inserted, `f` is not called and the result is `Err(Full)`.
    ///
    /// Each insert looks at a bounded number of keys (`shard/evict.rs`):
    /// before a sticky key goes or `Full` is returned, every key of the
    /// probation queue and at least 16 keys of main from the CLOCK hand (all
    /// of main if it holds fewer). So `Full` means those keys are all busy,
    /// and a sticky key goes only if none of them is idle: in a shard of
    /// more than 16 keys, an idle (or no longer busy) key beyond them is
    /// reached within about two passes of the hand (2 × `capacity / shards /
    /// 16` such inserts: a backward shift can move a key behind it). A key that was
    /// evicted comes back with the default state.
    ///
    /// `f` runs under the shard's lock: keep it short, and do not call the
    /// same table from it (the lock is not reentrant).
    pub fn with<R>(&self, key: u64, f: impl FnOnce(&mut S) -> R) -> Result<R, Full> {
        debug_assert!(
            !S::USES_TIME,
            "a state whose checks read the time needs with_at"
        );
        self.with_evicted_at(key, 0, f, |_| {})
    }

    /// [`with`](Self::with) at time `now`: eviction asks
    /// [`KeyState::busy`] and [`KeyState::sticky`] with it (for states whose
    /// checks depend on time: a debt that ends, a lock-out that expires).
    pub fn with_at<R>(&self, key: u64, now: u64, f: impl FnOnce(&mut S) -> R) -> Result<R, Full> {
        self.with_evicted_at(key, now, f, |_| {})
    }

    /// [`with`](Self::with), and `evicted` is called with the state of the
    /// key evicted to make room (if any), before it is dropped: to carry
    /// over what it held (unreported hits). It runs under the shard's lock.
    pub fn with_evicted<R>(
        &self,
        key: u64,
        f: impl FnOnce(&mut S) -> R,
        evicted: impl FnMut(&mut S),
    ) -> Result<R, Full> {
        debug_assert!(
            !S::USES_TIME,
            "a state whose checks read the time needs with_evicted_at"
        );
        self.with_evicted_at(key, 0, f, evicted)
    }

    /// [`with_evicted`](Self::with_evicted) at time `now` (see
    /// [`with_at`](Self::with_at)).
    pub fn with_evicted_at<R>(
        &self,
        key: u64,
        now: u64,
        f: impl FnOnce(&mut S) -> R,
        mut evicted: impl FnMut(&mut S),
    ) -> Result<R, Full> {
        let p = self.shard(key);
        let mut shard = p.shard.lock();
        let r = shard.with(key, now, f, &mut evicted);
        if shard.changed {
            // Only after an insert: a hit writes nothing outside its cell.
            shard.changed = false;
            p.len.store(shard.len(), Ordering::Relaxed);
            p.evicted.store(shard.evicted, Ordering::Relaxed);
        }
        r.ok_or(Full)
    }

    /// Runs `f` on `key`'s state if the key is present (never inserts): for
    /// a release, which must not create a key.
    pub fn get<R>(&self, key: u64, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        let p = self.shard(key);
        let mut shard = p.shard.lock();
        shard.get(key, f)
    }

    /// Keys held now (the `keys` gauge). Shards are read one after another,
    /// so under traffic it is a close estimate, never above `capacity`.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|p| p.len.load(Ordering::Relaxed))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound given to [`new`](Self::new).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys evicted to make room since the table was made (the `evicted`
    /// counter).
    pub fn evicted(&self) -> u64 {
        self.shards
            .iter()
            .map(|p| p.evicted.load(Ordering::Relaxed))
            .sum()
    }

    /// Calls `f` for every key and its state, shard by shard, holding one
    /// shard's lock at a time (for `show`/`top` commands). Keys inserted or
    /// evicted meanwhile in other shards may or may not be seen.
    pub fn for_each(&self, mut f: impl FnMut(u64, &S)) {
        for p in self.shards.iter() {
            p.shard.lock().for_each(&mut f);
        }
    }

    /// [`for_each`](Self::for_each) with each state mutable (a report that
    /// takes the hits it sends, under the same lock as it reads them).
    pub fn for_each_mut(&self, mut f: impl FnMut(u64, &mut S)) {
        for p in self.shards.iter() {
            p.shard.lock().for_each_mut(&mut f);
        }
    }

    /// Shards of the table (`clamp(capacity / 1024, 1, 64)`).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard `key` lives in, `0..shards()`: for state a caller keeps per
    /// shard beside the table (used only under that shard's calls, it
    /// meets no other shard's threads).
    pub fn shard_index(&self, key: u64) -> usize {
        ((u64::from(key as u32) * self.shards.len() as u64) >> 32) as usize
    }

    /// The shard of `key`, from its low 32 bits (cells within a shard are
    /// placed by its high bits).
    fn shard(&self, key: u64) -> &Padded<S> {
        &self.shards[self.shard_index(key)]
    }
}
