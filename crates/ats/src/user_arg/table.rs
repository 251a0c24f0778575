//! Where a [`TxnData`](super::TxnData) keeps its values on Traffic Server
//! 10: a fixed-size, lock-free table from transaction ids to pointers.
//!
//! 10.x's only per-transaction argument API, `TSUserArgGet`/`TSUserArgSet`,
//! does a `__dynamic_cast` in every call (about 540 instructions under
//! callgrind), and a user argument needs four calls per transaction: check, store,
//! take, clear. Here each is a look at one cache line: no lock, no
//! allocation. No crate fits: the concurrent maps (dashmap, scc, papaya) lock
//! shards or allocate per entry.
//!
//! The table is set-associative: an id hashes to one bucket of [`WAYS`]
//! entries, 64 bytes, and lives in any free entry of it. No probing across
//! buckets means no tombstones: a removed entry is free again at once, so
//! the table never degrades however many transactions pass through it. When
//! every entry of a bucket is taken the insert fails and the caller keeps
//! the value elsewhere (`TxnData` falls back to the user argument), so a
//! flood of open transactions costs speed, never correctness. With 2^13
//! buckets and uniform hashing, a bucket is full for ~2 % of inserts with
//! 8 000 transactions open at once, and for ~10^-5 with 1 000.
//!
//! What keeps it simple:
//! - a key is inserted, read and removed only by its own transaction, whose
//!   callbacks ATS runs one at a time (each seeing the previous one's
//!   writes), so operations on one key never race; other transactions only
//!   compete for free entries, through a compare-and-swap;
//! - ids are unique for the life of the process (a 64-bit counter), so an
//!   entry never has to be told apart from an older one of the same key.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Entries per bucket: 4 of 16 bytes, one cache line.
pub(super) const WAYS: usize = 4;

const EMPTY: u64 = 0;
/// Claimed by an insert that has not published its key yet.
const BUSY: u64 = u64::MAX;

struct Entry {
    /// `EMPTY`, `BUSY`, or a transaction id + 1.
    key: AtomicU64,
    value: AtomicPtr<()>,
}

#[repr(C, align(64))]
struct Bucket([Entry; WAYS]);

/// Why an insert did not store its value.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The id is in the table already.
    Taken,
    /// Every entry of the id's bucket holds another id.
    Full,
}

pub(super) struct IdTable {
    buckets: Box<[Bucket]>,
    /// `buckets.len() - 1` (a power of two minus one).
    mask: usize,
}

impl IdTable {
    /// A table of `2^bits` buckets (64 bytes each).
    pub(super) fn new(bits: u32) -> Self {
        let entry = || Entry {
            key: AtomicU64::new(EMPTY),
            value: AtomicPtr::new(std::ptr::null_mut()),
        };
        let buckets = (0..1usize << bits)
            .map(|_| Bucket(std::array::from_fn(|_| entry())))
            .collect();
        IdTable {
            buckets,
            mask: (1usize << bits) - 1,
        }
    }

    /// The stored form of `id`, or `None` for the two ids that cannot be
    /// told from the markers (ATS's ids are below 2^63).
    fn key(id: u64) -> Option<u64> {
        id.checked_add(1).filter(|&k| k != BUSY)
    }

    /// The bucket of `key`. Ids come from a counter: Fibonacci hashing
    /// spreads neighbours over the whole table.
    fn bucket(&self, key: u64) -> &[Entry; WAYS] {
        let h = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        &self.buckets[h & self.mask].0
    }

    fn find(&self, key: u64) -> Option<&Entry> {
        self.bucket(key)
            .iter()
            .find(|e| e.key.load(Ordering::Acquire) == key)
    }

    /// The value stored for `id`.
    pub(super) fn get(&self, id: u64) -> Option<*mut ()> {
        let e = self.find(Self::key(id)?)?;
        Some(e.value.load(Ordering::Acquire))
    }

    /// Stores `value` for `id`.
    pub(super) fn insert(&self, id: u64, value: *mut ()) -> Result<(), Refused> {
        let Some(key) = Self::key(id) else {
            return Err(Refused::Full);
        };
        let bucket = self.bucket(key);
        // Only this transaction inserts `key`: checked once, it stays absent.
        if bucket.iter().any(|e| e.key.load(Ordering::Relaxed) == key) {
            return Err(Refused::Taken);
        }
        for e in bucket {
            if e.key
                .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // The value is written before the key is published: a reader
                // that finds the key (Acquire) sees the value.
                e.value.store(value, Ordering::Relaxed);
                e.key.store(key, Ordering::Release);
                return Ok(());
            }
        }
        Err(Refused::Full)
    }

    /// Takes `id`'s value out; its entry is free again.
    pub(super) fn remove(&self, id: u64) -> Option<*mut ()> {
        let e = self.find(Self::key(id)?)?;
        let value = e.value.swap(std::ptr::null_mut(), Ordering::Relaxed);
        e.key.store(EMPTY, Ordering::Release);
        Some(value)
    }
}

#[cfg(test)]
mod tests;
