//! One shard of the sieve: a slab of entries, a free list of its slots,
//! the buckets as intrusive doubly linked lists over the slab, and the
//! index from key to slot, with the moves between buckets (promotion,
//! eviction, aging, blocking). Slots are reused through the free list and
//! the index is reserved once, so the shard stays bounded and allocates
//! nothing once its slab has grown to its capacity.

use std::collections::HashMap;
use std::hash::RandomState;
use std::mem::size_of;

use super::{Hit, SieveParams, BLOCK};

/// No entry (list ends, empty lists, the end of the free list).
const NIL: u32 = u32::MAX;

/// An address: 8 + 8 + 4 + 4 + 4 + 1 bytes, 32 with padding (plus 45 to 68
/// bytes of index per entry at the bound: see [`Shard::new`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
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
pub(super) struct Shard {
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
    pub(super) fn new(sizes: &[u32]) -> Shard {
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

    /// The most entries the shard can hold.
    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    fn buckets(&self) -> u8 {
        // 1..=20 ranked buckets plus the block bucket.
        u8::try_from(self.lists.len().saturating_sub(1)).unwrap_or(0)
    }

    pub(super) fn increment(&mut self, key: u64, now: u64, params: &SieveParams) -> Hit {
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

    pub(super) fn lookup(&self, key: u64) -> Option<Hit> {
        self.hit(*self.index.get(&key)?)
    }

    fn hit(&self, idx: u32) -> Option<Hit> {
        let e = self.slab.get(idx as usize)?;
        Some(Hit {
            bucket: e.bucket,
            count: e.count,
        })
    }

    pub(super) fn block(&mut self, key: u64, now: u64) -> Hit {
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

    pub(super) fn forget(&mut self, key: u64) -> bool {
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
    pub(super) fn heap_bytes(&self) -> usize {
        let index = match self.index_slots {
            0 => 0,
            n => n * (size_of::<(u64, u32)>() + 1) + 16,
        };
        self.slab.capacity() * size_of::<Entry>() + self.lists.len() * size_of::<List>() + index
    }

    /// (slab length, slab allocation, capacity, index capacity now and as
    /// reserved) (tests).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        let reserved = match self.index_slots {
            n @ 0..8 => n.saturating_sub(1),
            n => n / 8 * 7,
        };
        (
            self.slab.len(),
            self.slab.capacity(),
            self.cap,
            self.index.capacity(),
            reserved,
        )
    }

    /// Each bucket's size (tests).
    #[cfg(test)]
    pub(super) fn bucket_caps(&self) -> Vec<u32> {
        self.lists.iter().map(|l| l.cap).collect()
    }

    #[cfg(test)]
    pub(super) fn dump(&self) -> Vec<Vec<(u64, u32)>> {
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
    pub(super) fn check(&self) {
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
