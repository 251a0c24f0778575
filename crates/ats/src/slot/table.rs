//! Where a [`TxnSlot`](super::TxnSlot) keeps its values on Traffic Server
//! 10: a fixed-size, lock-free table from transaction ids to pointers.
//!
//! 10.x's only per-transaction argument API, `TSUserArgGet`/`TSUserArgSet`,
//! does a `__dynamic_cast` in every call (about 540 instructions under
//! callgrind), and a slot needs four calls per transaction: check, store,
//! take, clear. Here each is a short probe of an open-addressed array keyed
//! by `TSHttpTxnIdGet`: no lock, no allocation. No crate fits: the
//! concurrent maps (dashmap, scc, papaya) lock shards or allocate per entry.
//!
//! What keeps it simple:
//! - a key is inserted, read and removed only by its own transaction, whose
//!   callbacks ATS runs one at a time (each seeing the previous one's
//!   writes), so operations on one key never race; other transactions only
//!   compete for free entries, through a compare-and-swap;
//! - ids are unique for the life of the process (a 64-bit counter), so an
//!   entry never has to be told apart from an older one of the same key.
//!
//! A removed entry becomes a tombstone, reusable by any later insert. A
//! lookup stops at an empty entry or after [`PROBES`] entries; when all of
//! an insert's probes are taken the insert fails and the caller keeps the
//! value elsewhere (`TxnSlot` falls back to the user argument), so a flood
//! of open transactions costs speed, never correctness.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Entries probed at most, from the key's home entry on.
pub(super) const PROBES: usize = 32;

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;
/// Claimed by an insert that has not published its key yet.
const BUSY: u64 = u64::MAX - 1;

struct Entry {
    /// `EMPTY`, `TOMBSTONE`, `BUSY`, or a transaction id + 1.
    key: AtomicU64,
    value: AtomicPtr<()>,
}

pub(super) struct IdTable {
    entries: Box<[Entry]>,
    /// `entries.len() - 1` (a power of two minus one).
    mask: usize,
}

impl IdTable {
    /// A table of `2^bits` entries (16 bytes each).
    pub(super) fn new(bits: u32) -> Self {
        let len = 1usize << bits;
        let entries = (0..len)
            .map(|_| Entry {
                key: AtomicU64::new(EMPTY),
                value: AtomicPtr::new(std::ptr::null_mut()),
            })
            .collect();
        IdTable {
            entries,
            mask: len - 1,
        }
    }

    /// The stored form of `id`, or `None` for the three ids that cannot be
    /// told from the markers (ATS's ids are below 2^63).
    fn key(id: u64) -> Option<u64> {
        id.checked_add(1).filter(|&k| k != TOMBSTONE && k != BUSY)
    }

    /// The entries `id` may be in, in probe order. Ids come from a counter:
    /// Fibonacci hashing spreads neighbours apart.
    fn probe(&self, key: u64) -> impl Iterator<Item = &Entry> {
        let home = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        (0..PROBES.min(self.entries.len())).map(move |i| &self.entries[(home + i) & self.mask])
    }

    fn find(&self, key: u64) -> Option<&Entry> {
        self.probe(key)
            .map(|e| (e, e.key.load(Ordering::Acquire)))
            .take_while(|&(_, k)| k != EMPTY)
            .find(|&(_, k)| k == key)
            .map(|(e, _)| e)
    }

    /// The value stored for `id`.
    pub(super) fn get(&self, id: u64) -> Option<*mut ()> {
        let key = Self::key(id)?;
        self.find(key).map(|e| e.value.load(Ordering::Acquire))
    }

    /// Stores `value` for `id`, which must not be in the table (check with
    /// [`get`](Self::get)). Hands `value` back if every probed entry is taken.
    pub(super) fn insert(&self, id: u64, value: *mut ()) -> Result<(), *mut ()> {
        let Some(key) = Self::key(id) else {
            return Err(value);
        };
        for e in self.probe(key) {
            let mut seen = e.key.load(Ordering::Relaxed);
            while seen == EMPTY || seen == TOMBSTONE {
                // The value is written before the key is published: a reader
                // that finds the key (Acquire) sees the value.
                match e
                    .key
                    .compare_exchange(seen, BUSY, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // Claimed: meanwhile a lookup walks past BUSY (it is
                        // not EMPTY) and no other insert takes it.
                        e.value.store(value, Ordering::Relaxed);
                        e.key.store(key, Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => seen = now,
                }
            }
        }
        Err(value)
    }

    /// Takes `id`'s value out, leaving a tombstone.
    pub(super) fn remove(&self, id: u64) -> Option<*mut ()> {
        let key = Self::key(id)?;
        let e = self.find(key)?;
        let value = e.value.swap(std::ptr::null_mut(), Ordering::AcqRel);
        e.key.store(TOMBSTONE, Ordering::Release);
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
    fn insert_get_remove() {
        let t = IdTable::new(4);
        assert_eq!(t.get(7), None);
        t.insert(7, ptr(1)).unwrap();
        t.insert(0, ptr(2)).unwrap();
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
        assert_eq!(t.insert(u64::MAX, ptr(1)), Err(ptr(1)));
        assert_eq!(t.insert(u64::MAX - 1, ptr(1)), Err(ptr(1)));
        assert_eq!(t.insert(u64::MAX - 2, ptr(1)), Err(ptr(1)));
        assert_eq!(t.get(u64::MAX), None);
    }

    #[test]
    fn a_full_table_hands_the_value_back_and_frees_up_on_remove() {
        let t = IdTable::new(3); // 8 entries, fewer than PROBES
        for id in 0..8 {
            t.insert(id, ptr(id as usize)).unwrap();
        }
        assert_eq!(t.insert(100, ptr(100)), Err(ptr(100)));
        assert_eq!(t.get(100), None);
        assert_eq!(t.remove(3), Some(ptr(3)));
        t.insert(100, ptr(100)).unwrap();
        for id in (0..8).filter(|&id| id != 3) {
            assert_eq!(t.get(id), Some(ptr(id as usize)), "id {id}");
        }
        assert_eq!(t.get(100), Some(ptr(100)));
    }

    #[test]
    fn tombstones_do_not_hide_later_entries() {
        let t = IdTable::new(3);
        for id in 0..8 {
            t.insert(id, ptr(id as usize)).unwrap();
        }
        // Every entry but one is a tombstone now: lookups walk past them.
        for id in 0..7 {
            t.remove(id);
        }
        assert_eq!(t.get(7), Some(ptr(7)));
        for id in 0..7 {
            assert_eq!(t.get(id), None);
        }
    }

    #[test]
    fn concurrent_transactions_each_find_their_own() {
        let t = std::sync::Arc::new(IdTable::new(13));
        let threads: Vec<_> = (0..4u64)
            .map(|th| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for round in 0..2000u64 {
                        let id = round * 4 + th;
                        let v = ptr(id as usize);
                        assert_eq!(t.get(id), None);
                        t.insert(id, v).unwrap();
                        assert_eq!(t.get(id), Some(v));
                        if round % 10 != 0 {
                            assert_eq!(t.remove(id), Some(v));
                        }
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        for id in 0..8000u64 {
            let kept = (id / 4) % 10 == 0;
            assert_eq!(t.get(id).is_some(), kept, "id {id}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few ids in a small table: collisions, tombstones and full probes.
        let id = 0u64..48;
        prop_oneof![
            id.clone().prop_map(Op::Insert),
            id.clone().prop_map(Op::Remove),
            id.prop_map(Op::Get),
        ]
    }

    proptest! {
        /// Against a HashMap: what is found is what was stored, an insert
        /// that fails leaves the table as it was, and removes free entries.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..300)) {
            let t = IdTable::new(5);
            let mut model: HashMap<u64, usize> = HashMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    // As TxnSlot does: a key already present is not inserted again.
                    Op::Insert(id) if model.contains_key(&id) => {}
                    Op::Insert(id) => {
                        if t.insert(id, ptr(n)).is_ok() {
                            model.insert(id, n);
                        } else {
                            // 32 entries, all probed: refused only when all are live.
                            prop_assert_eq!(model.len(), 32);
                        }
                    }
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
