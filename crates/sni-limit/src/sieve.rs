//! The IP-reputation sieve: ranked LRU buckets that sort client addresses
//! by how often they come, so that a selector under pressure refuses the
//! heaviest clients first (a bounded re-implementation of Traffic Server's
//! rate_limit `SieveLru`, `ip_reputation.cc`).
//!
//! Buckets `1..=N` are ranked: a new address enters at the top of bucket
//! `N` (the largest, 2^S entries); each hit moves it one bucket up (bucket
//! `i` holds 2^(S-N+i) entries), taking the place of that bucket's least
//! recent entry if it has at least as many hits, so bucket 1 ends up with
//! the heaviest recent clients. Bucket 0 holds perma-blocked addresses.
//! [`pressure`] turns a selector's load into the lowest bucket refused.
//!
//! Deliberate differences from upstream: aging is checked on every hit
//! (upstream: every 10th) and resets the entry's time (upstream keeps it, so
//! an aged entry ages again at once); the perma-block rule is applied here,
//! after every hit; moving an entry into a full bucket (aging, blocking)
//! evicts that bucket's least recent entry, so no bucket ever exceeds its
//! size; a new address blocked by [`Sieve::block`] starts with 0 hits.
//!
//! Memory is bounded and allocated up front or while warming up: per shard
//! a slab of entries that grows to the sum of its buckets' sizes and never
//! beyond, and an index reserved once, never grown (`Shard::new`): 77 bytes
//! per address at the bound (N >= 3; 100 at N = 1), of which 45 up front.
//! No clock is read: every call that needs the time is given it
//! (nanoseconds).

mod shard;

use std::mem::size_of;

use parking_lot::Mutex;

use shard::Shard;

/// Largest `size` (and so `buckets`): 2^20 addresses in the entry bucket.
const MAX_SIZE: u8 = 20;
/// Enough that threads rarely meet on one lock.
const MAX_SHARDS: usize = 16;
/// The perma-block bucket.
const BLOCK: u8 = 0;

/// A sieve's parameters (the `ip-rep` node of a selector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SieveParams {
    /// N, the number of ranked buckets, `1..=S`: bucket N is the entry
    /// bucket, bucket 1 the hottest.
    pub buckets: u8,
    /// S, `N..=20`: the entry bucket and the block bucket hold 2^S entries,
    /// bucket `i` 2^(S-N+i).
    pub size: u8,
    /// Nanoseconds after which an entry of a ranked bucket is aged on its
    /// next hit (hits divided by 8, back to the entry bucket); None: never.
    pub max_age: Option<u64>,
    /// The perma-block rule; None: nothing is blocked but by [`Sieve::block`].
    pub perma: Option<Perma>,
}

/// The perma-block rule: an address with more than `limit` hits that
/// reaches bucket `threshold` or hotter is moved to the block bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perma {
    /// Hits an address may have before it can be blocked.
    pub limit: u32,
    /// The coldest ranked bucket whose addresses can be blocked (0: none).
    pub threshold: u8,
    /// Nanoseconds after which a blocked address is aged on its next hit
    /// (hits divided by 8, back to the entry bucket); None: blocked for good
    /// (until evicted by newer blocks).
    pub max_age: Option<u64>,
}

/// Where an address stands after a hit: its bucket (0: blocked) and hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// 0 (blocked) to N (the entry bucket).
    pub bucket: u8,
    /// Hits counted (divided by 8 at each aging).
    pub count: u32,
}

impl SieveParams {
    /// The parameters the sieve uses: `buckets` in `1..=20`, `size` in
    /// `buckets..=20` (callers validate; this only keeps the sizes sane).
    fn normalized(self) -> Self {
        let buckets = self.buckets.clamp(1, MAX_SIZE);
        let size = self.size.clamp(buckets, MAX_SIZE);
        SieveParams {
            buckets,
            size,
            ..self
        }
    }

    /// Entries `bucket` holds in the whole sieve (normalized parameters).
    fn bucket_size(&self, bucket: u8) -> usize {
        let shift = if bucket == BLOCK {
            self.size
        } else {
            // Bucket <= N <= S: no underflow.
            (self.size + bucket).saturating_sub(self.buckets)
        };
        1 << shift
    }
}

/// The pressure on a selector with `active` connections of `limit`, for a
/// sieve of `buckets` buckets that starts refusing at `percentage` (0..=99,
/// larger is taken as 99) percent of the limit: None below it (or with no
/// limit), else `floor((f - percentage) * (N + 1) / (100 - percentage))`
/// capped at N, where f is `active / limit` in percent. See [`refused`].
#[must_use]
pub fn pressure(active: u32, limit: u32, percentage: u8, buckets: u8) -> Option<u8> {
    if limit == 0 {
        return None;
    }
    let pct = u64::from(percentage.min(99));
    let (active, limit) = (u64::from(active), u64::from(limit));
    // f >= pct, in hundredths of the limit: exact, no floats.
    let over = (active * 100).checked_sub(pct * limit)?;
    let p = over * (u64::from(buckets) + 1) / ((100 - pct) * limit);
    Some(u8::try_from(p).unwrap_or(u8::MAX).min(buckets))
}

/// Whether an address at `hit` is refused under `pressure`: when the
/// pressure is above its bucket (at 1 only blocked addresses, at N every
/// bucket but the entry bucket).
#[must_use]
pub fn refused(pressure: Option<u8>, hit: Hit) -> bool {
    pressure.is_some_and(|p| p > hit.bucket)
}

/// The sieve of one selector, shared by threads: its addresses (64-bit keys,
/// hashed by the caller) spread over shards, each behind its own lock.
pub struct Sieve {
    params: SieveParams,
    shards: Box<[Mutex<Shard>]>,
    /// log2 of the shard count.
    shard_bits: u32,
    /// The sum of the shards' capacities.
    capacity: usize,
}

impl std::fmt::Debug for Sieve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sieve")
            .field("params", &self.params)
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Sieve {
    /// An empty sieve (`buckets` and `size` out of range are clamped: see
    /// [`params`](Self::params)). The shard count is a power of two, at most 16, that
    /// leaves every bucket of a shard at least 2 entries: bucket 1 (2^(S-N+1)
    /// entries) is split into 2^min(4, S-N) shards.
    #[must_use]
    pub fn new(params: SieveParams) -> Sieve {
        let params = params.normalized();
        let bits = u32::from(params.size - params.buckets).min(MAX_SHARDS.ilog2());
        Sieve::build(params, bits)
    }

    /// `new` with `shards` shards (rounded down to a power of two in
    /// `1..=16`; bucket sizes rounded down, at least 1).
    #[cfg(test)]
    fn with_shards(params: SieveParams, shards: usize) -> Sieve {
        let bits = shards.clamp(1, MAX_SHARDS).ilog2();
        Sieve::build(params.normalized(), bits)
    }

    fn build(params: SieveParams, bits: u32) -> Sieve {
        let sizes: Vec<u32> = (0..=params.buckets)
            .map(|b| {
                let per_shard = (params.bucket_size(b) >> bits).max(1);
                u32::try_from(per_shard).unwrap_or(u32::MAX)
            })
            .collect();
        let shards: Box<[Mutex<Shard>]> = (0..1usize << bits)
            .map(|_| Mutex::new(Shard::new(&sizes)))
            .collect();
        let capacity = shards.iter().map(|s| s.lock().cap()).sum();
        Sieve {
            params,
            shards,
            shard_bits: bits,
            capacity,
        }
    }

    /// The parameters in use (normalized: `buckets` and `size` within range).
    #[must_use]
    pub fn params(&self) -> &SieveParams {
        &self.params
    }

    /// The most addresses the sieve can hold (all buckets, all shards).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The shard of `key`. The key is already a keyed hash, but the shard
    /// takes the top bits of a multiplicative mix so that they are
    /// independent of the bits the index's own hash uses.
    fn shard(&self, key: u64) -> &Mutex<Shard> {
        let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // One shard: a shift by 64, None.
        let i = mixed.checked_shr(64 - self.shard_bits).unwrap_or(0);
        // In bounds: there are 2^shard_bits >= 1 shards, and the mask keeps
        // the index below that on any platform.
        &self.shards[usize::try_from(i).unwrap_or(0) & (self.shards.len() - 1)]
    }

    /// Counts a hit of `key` at `now` and moves it through the buckets (see
    /// the module doc); returns where it stands after the hit.
    #[must_use]
    pub fn increment(&self, key: u64, now: u64) -> Hit {
        self.shard(key).lock().increment(key, now, &self.params)
    }

    /// Where `key` stands, without counting a hit.
    #[must_use]
    pub fn lookup(&self, key: u64) -> Option<Hit> {
        self.shard(key).lock().lookup(key)
    }

    /// Moves `key` to the top of the block bucket (inserting it with 0 hits
    /// if unknown), restarting its age; the block bucket's least recent
    /// address is forgotten if it is full. Returns where it stands.
    pub fn block(&self, key: u64, now: u64) -> Hit {
        self.shard(key).lock().block(key, now)
    }

    /// Forgets `key`; false if it was not known.
    pub fn forget(&self, key: u64) -> bool {
        self.shard(key).lock().forget(key)
    }

    /// Addresses held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True when no address is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes allocated for the sieve: its shards, their slabs as allocated
    /// so far, and their indexes (reserved up front).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        size_of::<Sieve>()
            + self
                .shards
                .iter()
                .map(|s| size_of::<Mutex<Shard>>() + s.lock().heap_bytes())
                .sum::<usize>()
    }

    /// Each shard's buckets, most recent first, as (key, count) (tests).
    #[cfg(test)]
    fn dump(&self) -> Vec<Vec<Vec<(u64, u32)>>> {
        self.shards.iter().map(|s| s.lock().dump()).collect()
    }

    /// Checks every shard's links and counts (tests).
    #[cfg(test)]
    fn check(&self) {
        for s in self.shards.iter() {
            s.lock().check();
        }
    }

    /// Per shard: (slab length, slab allocation, capacity, index capacity
    /// now and as reserved).
    #[cfg(test)]
    fn shard_sizes(&self) -> Vec<(usize, usize, usize, usize, usize)> {
        self.shards.iter().map(|s| s.lock().sizes()).collect()
    }
}

#[cfg(test)]
mod tests;
