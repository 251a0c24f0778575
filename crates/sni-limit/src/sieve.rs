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

use std::collections::HashMap;
use std::hash::RandomState;
use std::mem::size_of;

use parking_lot::Mutex;

/// Largest `size` (and so `buckets`): 2^20 addresses in the entry bucket.
const MAX_SIZE: u8 = 20;
/// Enough that threads rarely meet on one lock.
const MAX_SHARDS: usize = 16;
/// The perma-block bucket.
const BLOCK: u8 = 0;
/// No entry (list ends, empty lists, the end of the free list).
const NIL: u32 = u32::MAX;

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
        let capacity = shards.iter().map(|s| s.lock().cap).sum();
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
        self.shards.iter().map(|s| s.lock().index.len()).sum()
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
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                let reserved = match s.index_slots {
                    n @ 0..8 => n.saturating_sub(1),
                    n => n / 8 * 7,
                };
                (
                    s.slab.len(),
                    s.slab.capacity(),
                    s.cap,
                    s.index.capacity(),
                    reserved,
                )
            })
            .collect()
    }
}

/// An address: 8 + 8 + 4 + 4 + 4 + 1 bytes, 32 with padding (plus 45 to 68
/// bytes of index per entry at the bound: see [`Shard::new`]).
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    /// When it was added, last aged or blocked.
    added: u64,
    count: u32,
    /// Neighbours in its bucket's list (towards the head, the tail), or in
    /// the free list (`next`).
    prev: u32,
    next: u32,
    bucket: u8,
}

const _: () = assert!(size_of::<Entry>() == 32);

/// A bucket: an intrusive doubly linked list over the slab.
#[derive(Clone, Copy, Debug)]
struct List {
    /// Most recent.
    head: u32,
    /// Least recent.
    tail: u32,
    len: u32,
    cap: u32,
}

/// A shard: its buckets (index = bucket number) over one slab of entries.
///
/// Invariants: every bucket holds at most `cap` entries; every index entry
/// points at a slab slot linked in exactly one bucket; the other slots are
/// on the free list. Every method that follows a link returns None if one
/// is broken (it cannot be), and the shard is then cleared rather than
/// trusted or panicking.
struct Shard {
    slab: Vec<Entry>,
    /// The sum of the buckets' sizes: the slab never grows beyond it.
    cap: usize,
    /// Head of the free slots, chained through `next`.
    free: u32,
    lists: Box<[List]>,
    /// Keyed SipHash: clients choose their addresses, so their keys.
    index: HashMap<u64, u32, RandomState>,
    /// The index's table, in slots (fixed: see [`Shard::new`]).
    index_slots: usize,
}

impl Shard {
    /// A shard with buckets of `sizes` entries. The index is reserved for
    /// twice the capacity: hashbrown's erase leaves tombstones, and once they
    /// use up its spare room it rehashes in place only while at most half
    /// full, else it grows. At twice the bound it never grows: 17-byte slots
    /// (a control byte and a (u64, u32)), 8/3 of them per entry at the bound
    /// (N >= 3: the bound is 3 x 2^S, the slots 8 x 2^S), 45 bytes; at N = 1
    /// 4 of them, 68 bytes.
    fn new(sizes: &[u32]) -> Shard {
        let cap = sizes.iter().map(|&s| s as usize).sum::<usize>();
        let mut index = HashMap::with_hasher(RandomState::new());
        index.reserve(2 * cap + 2);
        // hashbrown keeps a power of two of slots, at most 7/8 full (all but
        // one below 8); `capacity()` is exact only while nothing was erased.
        let index_slots = match index.capacity() {
            0 => 0,
            c @ 1..8 => c + 1,
            c => c / 7 * 8,
        };
        Shard {
            slab: Vec::new(),
            cap,
            free: NIL,
            lists: sizes
                .iter()
                .map(|&cap| List {
                    head: NIL,
                    tail: NIL,
                    len: 0,
                    cap,
                })
                .collect(),
            index,
            index_slots,
        }
    }

    fn buckets(&self) -> u8 {
        // 1..=20 ranked buckets plus the block bucket.
        u8::try_from(self.lists.len().saturating_sub(1)).unwrap_or(0)
    }

    fn increment(&mut self, key: u64, now: u64, params: &SieveParams) -> Hit {
        if let Some(hit) = self.try_increment(key, now, params) {
            return hit;
        }
        self.clear();
        self.try_increment(key, now, params).unwrap_or(Hit {
            bucket: params.buckets,
            count: 1,
        })
    }

    fn try_increment(&mut self, key: u64, now: u64, params: &SieveParams) -> Option<Hit> {
        let entry_bucket = self.buckets();
        let Some(&idx) = self.index.get(&key) else {
            let idx = self.insert(key, entry_bucket, 1, now)?;
            return self.perma(idx, now, params);
        };
        let e = self.slab.get(idx as usize)?;
        let (bucket, count, added) = (e.bucket, e.count, e.added);
        let max_age = if bucket == BLOCK {
            params.perma.and_then(|p| p.max_age)
        } else {
            params.max_age
        };
        if max_age.is_some_and(|age| now.saturating_sub(added) > age) {
            if bucket != entry_bucket {
                self.make_room(entry_bucket)?;
            }
            self.move_top(idx, entry_bucket)?;
            let e = self.slab.get_mut(idx as usize)?;
            e.count >>= 3;
            e.added = now;
        } else {
            let count = count.saturating_add(1);
            self.slab.get_mut(idx as usize)?.count = count;
            if bucket >= 2 && bucket <= entry_bucket {
                let up = bucket - 1;
                let above = *self.lists.get(usize::from(up))?;
                if above.len < above.cap {
                    self.move_top(idx, up)?;
                } else if self.slab.get(above.tail as usize)?.count <= count {
                    // Takes the place of a least recent entry with no more
                    // hits, which goes down to the top of this bucket.
                    self.move_top(idx, up)?;
                    self.move_top(above.tail, bucket)?;
                } else {
                    self.move_top(idx, bucket)?;
                }
            } else if bucket <= 1 {
                self.move_top(idx, bucket)?;
            } else {
                return None;
            }
        }
        self.perma(idx, now, params)
    }

    /// Applies the perma-block rule to the entry just hit; its hit.
    fn perma(&mut self, idx: u32, now: u64, params: &SieveParams) -> Option<Hit> {
        let hit = self.hit(idx)?;
        match params.perma {
            Some(p) if hit.count > p.limit && hit.bucket >= 1 && hit.bucket <= p.threshold => {
                self.block_slot(idx, now)?;
                Some(Hit {
                    bucket: BLOCK,
                    count: hit.count,
                })
            }
            _ => Some(hit),
        }
    }

    fn lookup(&self, key: u64) -> Option<Hit> {
        self.hit(*self.index.get(&key)?)
    }

    fn hit(&self, idx: u32) -> Option<Hit> {
        let e = self.slab.get(idx as usize)?;
        Some(Hit {
            bucket: e.bucket,
            count: e.count,
        })
    }

    fn block(&mut self, key: u64, now: u64) -> Hit {
        if let Some(hit) = self.try_block(key, now) {
            return hit;
        }
        self.clear();
        self.try_block(key, now).unwrap_or(Hit {
            bucket: BLOCK,
            count: 0,
        })
    }

    fn try_block(&mut self, key: u64, now: u64) -> Option<Hit> {
        let idx = match self.index.get(&key) {
            Some(&idx) => {
                self.block_slot(idx, now)?;
                idx
            }
            None => self.insert(key, BLOCK, 0, now)?,
        };
        self.hit(idx)
    }

    /// Moves a held entry to the top of the block bucket, restarting its age.
    fn block_slot(&mut self, idx: u32, now: u64) -> Option<()> {
        if self.slab.get(idx as usize)?.bucket != BLOCK {
            self.make_room(BLOCK)?;
        }
        self.move_top(idx, BLOCK)?;
        self.slab.get_mut(idx as usize)?.added = now;
        Some(())
    }

    fn forget(&mut self, key: u64) -> bool {
        let Some(&idx) = self.index.get(&key) else {
            return false;
        };
        if self.remove(idx).is_none() {
            self.clear();
        }
        true
    }

    /// Inserts an unknown key at the top of `bucket`, evicting the bucket's
    /// least recent entry if it is full.
    fn insert(&mut self, key: u64, bucket: u8, count: u32, now: u64) -> Option<u32> {
        self.make_room(bucket)?;
        let idx = self.alloc()?;
        *self.slab.get_mut(idx as usize)? = Entry {
            key,
            added: now,
            count,
            prev: NIL,
            next: NIL,
            bucket,
        };
        self.push_front(idx, bucket)?;
        self.index.insert(key, idx);
        Some(idx)
    }

    /// Forgets `bucket`'s least recent entry if the bucket is full.
    fn make_room(&mut self, bucket: u8) -> Option<()> {
        let list = self.lists.get(usize::from(bucket))?;
        if list.len >= list.cap {
            self.remove(list.tail)?;
        }
        Some(())
    }

    /// A free slot: from the free list, else a new one at the end of the
    /// slab (growing it by doubling, up to `cap` and no further).
    fn alloc(&mut self) -> Option<u32> {
        if self.free != NIL {
            let idx = self.free;
            self.free = self.slab.get(idx as usize)?.next;
            return Some(idx);
        }
        let len = self.slab.len();
        if len >= self.cap {
            return None;
        }
        if len == self.slab.capacity() {
            self.slab.reserve_exact(len.max(16).min(self.cap - len));
        }
        let idx = u32::try_from(len).ok()?;
        self.slab.push(Entry {
            key: 0,
            added: 0,
            count: 0,
            prev: NIL,
            next: NIL,
            bucket: BLOCK,
        });
        Some(idx)
    }

    /// Unlinks a held entry, drops it from the index and frees its slot.
    fn remove(&mut self, idx: u32) -> Option<()> {
        self.unlink(idx)?;
        let free = self.free;
        let e = self.slab.get_mut(idx as usize)?;
        e.next = free;
        let key = e.key;
        self.free = idx;
        self.index.remove(&key).map(|_| ())
    }

    fn move_top(&mut self, idx: u32, bucket: u8) -> Option<()> {
        self.unlink(idx)?;
        self.push_front(idx, bucket)
    }

    fn unlink(&mut self, idx: u32) -> Option<()> {
        let e = self.slab.get_mut(idx as usize)?;
        let (prev, next, bucket) = (e.prev, e.next, e.bucket);
        (e.prev, e.next) = (NIL, NIL);
        let list = self.lists.get_mut(usize::from(bucket))?;
        list.len = list.len.checked_sub(1)?;
        if prev == NIL {
            list.head = next;
        } else {
            self.slab.get_mut(prev as usize)?.next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.slab.get_mut(next as usize)?.prev = prev;
        }
        Some(())
    }

    /// Links an unlinked entry at the top of `bucket`.
    fn push_front(&mut self, idx: u32, bucket: u8) -> Option<()> {
        let list = self.lists.get_mut(usize::from(bucket))?;
        let old = list.head;
        list.head = idx;
        if list.tail == NIL {
            list.tail = idx;
        }
        list.len += 1;
        if old != NIL {
            self.slab.get_mut(old as usize)?.prev = idx;
        }
        let e = self.slab.get_mut(idx as usize)?;
        (e.prev, e.next, e.bucket) = (NIL, old, bucket);
        Some(())
    }

    /// Forgets everything, keeping the allocations: the way out of a state
    /// the invariants rule out.
    fn clear(&mut self) {
        self.slab.clear();
        self.index.clear();
        self.free = NIL;
        for list in self.lists.iter_mut() {
            (list.head, list.tail, list.len) = (NIL, NIL, 0);
        }
    }

    /// The slab and lists as allocated, and the index's table: per slot a
    /// (u64, u32) and a control byte, plus a group (16) of trailing control
    /// bytes.
    fn heap_bytes(&self) -> usize {
        let index = match self.index_slots {
            0 => 0,
            n => n * (size_of::<(u64, u32)>() + 1) + 16,
        };
        self.slab.capacity() * size_of::<Entry>() + self.lists.len() * size_of::<List>() + index
    }

    #[cfg(test)]
    fn dump(&self) -> Vec<Vec<(u64, u32)>> {
        self.lists
            .iter()
            .map(|list| {
                let mut out = Vec::new();
                let mut at = list.head;
                while at != NIL && out.len() <= self.cap {
                    let e = &self.slab[at as usize];
                    out.push((e.key, e.count));
                    at = e.next;
                }
                out
            })
            .collect()
    }

    #[cfg(test)]
    fn check(&self) {
        let mut linked = 0;
        for (b, list) in self.lists.iter().enumerate() {
            assert!(list.len <= list.cap, "bucket {b} over its size");
            let (mut at, mut prev, mut n) = (list.head, NIL, 0);
            while at != NIL {
                let e = &self.slab[at as usize];
                assert_eq!(usize::from(e.bucket), b);
                assert_eq!(e.prev, prev);
                assert_eq!(self.index.get(&e.key), Some(&at));
                (prev, at, n) = (at, e.next, n + 1);
                assert!(n <= list.len);
            }
            assert_eq!(list.tail, prev);
            assert_eq!(n, list.len);
            linked += n as usize;
        }
        assert_eq!(linked, self.index.len());
        let (mut at, mut free) = (self.free, 0);
        while at != NIL {
            (at, free) = (self.slab[at as usize].next, free + 1);
            assert!(free <= self.slab.len());
        }
        assert_eq!(linked + free, self.slab.len());
        assert!(self.slab.len() <= self.cap && self.slab.capacity() <= self.cap);
    }
}

#[cfg(test)]
mod tests;
