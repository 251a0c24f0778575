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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn ptr(n: usize) -> *mut () {
        // Never dereferenced: the table only stores pointers.
        std::ptr::without_provenance_mut(n * 8 + 8)
    }

    #[test]
    fn buckets_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn insert_get_remove() {
        let t = IdTable::new(4);
        assert_eq!(t.get(7), None);
        t.insert(7, ptr(1)).unwrap();
        t.insert(0, ptr(2)).unwrap();
        assert_eq!(t.insert(7, ptr(3)), Err(Refused::Taken));
        assert_eq!(t.get(7), Some(ptr(1)));
        assert_eq!(t.get(0), Some(ptr(2)));
        assert_eq!(t.remove(7), Some(ptr(1)));
        assert_eq!(t.get(7), None);
        assert_eq!(t.remove(7), None);
        assert_eq!(t.get(0), Some(ptr(2)));
    }

    #[test]
    fn ids_that_cannot_be_keys_are_refused() {
        let t = IdTable::new(4);
        assert_eq!(t.insert(u64::MAX, ptr(1)), Err(Refused::Full));
        assert_eq!(t.insert(u64::MAX - 1, ptr(1)), Err(Refused::Full));
        assert_eq!(t.get(u64::MAX), None);
        assert_eq!(t.remove(u64::MAX - 1), None);
    }

    #[test]
    fn a_full_bucket_refuses_and_frees_up_on_remove() {
        let t = IdTable::new(0); // one bucket
        for id in 0..WAYS as u64 {
            t.insert(id, ptr(id as usize)).unwrap();
        }
        assert_eq!(t.insert(100, ptr(100)), Err(Refused::Full));
        assert_eq!(t.get(100), None);
        assert_eq!(t.remove(2), Some(ptr(2)));
        t.insert(100, ptr(100)).unwrap();
        for id in [0, 1, 3] {
            assert_eq!(t.get(id), Some(ptr(id as usize)), "id {id}");
        }
        assert_eq!(t.get(100), Some(ptr(100)));
    }

    #[test]
    fn sequential_ids_spread_over_the_buckets() {
        // As ATS hands them out: consecutive ids filling half of the
        // entries all fit (uniform hashing would overfill ~1 % of buckets).
        for start in [0, 1_000_000, 1 << 40] {
            let t = IdTable::new(10);
            let refused = (start..start + 2048)
                .filter(|&id| t.insert(id, ptr(1)).is_err())
                .count();
            assert_eq!(refused, 0, "from {start}");
        }
    }

    #[test]
    fn concurrent_transactions_each_find_their_own() {
        let t = std::sync::Arc::new(IdTable::new(12));
        let threads: Vec<_> = (0..4u64)
            .map(|th| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for round in 0..5000u64 {
                        let id = round * 4 + th;
                        let v = ptr(id as usize);
                        assert_eq!(t.get(id), None);
                        if t.insert(id, v).is_err() {
                            continue; // a full bucket: TxnData spills
                        }
                        assert_eq!(t.get(id), Some(v));
                        if round % 10 == 0 {
                            kept.push(id);
                        } else {
                            assert_eq!(t.remove(id), Some(v));
                        }
                    }
                    kept
                })
            })
            .collect();
        let kept: Vec<u64> = threads
            .into_iter()
            .flat_map(|th| th.join().unwrap())
            .collect();
        assert!(kept.len() > 1500, "{} kept", kept.len());
        for id in 0..20_000u64 {
            let want = kept.contains(&id).then(|| ptr(id as usize));
            assert_eq!(t.get(id), want, "id {id}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few ids in a small table: full buckets and reuse of freed entries.
        let id = 0u64..40;
        prop_oneof![
            id.clone().prop_map(Op::Insert),
            id.clone().prop_map(Op::Remove),
            id.prop_map(Op::Get),
        ]
    }

    proptest! {
        /// Against a HashMap: what is found is what was stored, an id in the
        /// table is refused as taken, a refused insert changes nothing, and
        /// an insert is refused as full only when its bucket is.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let t = IdTable::new(2); // 4 buckets of 4
            let mut model: HashMap<u64, usize> = HashMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(id) => match t.insert(id, ptr(n)) {
                        Ok(()) => {
                            prop_assert!(model.insert(id, n).is_none());
                        }
                        Err(Refused::Taken) => prop_assert!(model.contains_key(&id)),
                        Err(Refused::Full) => {
                            prop_assert!(!model.contains_key(&id));
                            let key = IdTable::key(id).unwrap();
                            let same_bucket = model
                                .keys()
                                .filter(|&&m| std::ptr::eq(
                                    t.bucket(IdTable::key(m).unwrap()),
                                    t.bucket(key),
                                ))
                                .count();
                            prop_assert_eq!(same_bucket, WAYS);
                        }
                    },
                    Op::Remove(id) => {
                        prop_assert_eq!(t.remove(id), model.remove(&id).map(ptr));
                    }
                    Op::Get(id) => {
                        prop_assert_eq!(t.get(id), model.get(&id).copied().map(ptr));
                    }
                }
            }
            for (id, n) in model {
                prop_assert_eq!(t.get(id), Some(ptr(n)));
            }
        }
    }
}
