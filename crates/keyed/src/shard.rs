//! One shard: an open-addressing table (linear probing) with each key's
//! state inline, and an S3-FIFO eviction order, all under the shard's lock.
//!
//! Why inline and not a map of indices into a slab (quick_cache's layout): a
//! hit then costs one random cache miss (the cell) instead of three
//! (control byte, index, slab entry); at 1 M keys, 2 threads, measured
//! ~100 ns here against ~200 ns with quick_cache 0.7 under the same locks.
//!
//! S3-FIFO (Yang et al., SOSP 2023), adapted:
//! - a new key enters the *probation* queue (`small`, a FIFO of keys, 10 % of
//!   the shard); a key touched again before it reaches the queue's front
//!   graduates to *main*, an untouched one is evicted from there and its
//!   fingerprint kept in the *ghost* table. A flood of one-off keys therefore
//!   only ever evicts other one-off keys. Below the bound nothing is evicted
//!   and probation's oldest key moves on to main as is, so the queue never
//!   holds more than its 10 %.
//! - *main* is a CLOCK over the cell array (2-bit access counter per key).
//!   Array order is hash order rather than insertion order; CLOCK needs no
//!   particular order, only a hand that sweeps every cell.
//! - a key found in the ghost table skips probation (it was evicted recently
//!   and came back: a real client, not a scan).
//! - busy keys are skipped by both queues; a busy key at the probation front
//!   graduates to main, where CLOCK skips it while it stays busy. Sticky
//!   keys ([`KeyState::sticky`]) are skipped like busy ones, except that
//!   when no idle key was found one of them is evicted rather than refuse
//!   the new key.
//! - CLOCK's search is bounded by a scan credit earned per insert (see
//!   `evict.rs`): a flood of new keys into a shard of busy or sticky keys
//!   costs O(1) amortized per insert, never a sweep of the shard each.

use std::collections::VecDeque;

use crate::KeyState;

mod evict;

#[cfg(test)]
pub(crate) use evict::SCAN;

/// Accesses since the key entered its queue, saturating at 3.
const FREQ: u8 = 0b0011;
/// In the probation queue (otherwise in main).
const SMALL: u8 = 0b0100;
const OCCUPIED: u8 = 0b1000;

/// Cells are at most 2/3 full: linear probing stays short (2 cells on a
/// hit, 5 on a miss on average, adjacent in memory). 3/4 saves 5 bytes a
/// key but makes inserting at the bound ~15 % slower (longer clusters).
fn max_cells(cap: usize) -> usize {
    if cap == 0 {
        0
    } else {
        cap + cap / 2 + 1
    }
}

/// First table size: small, so a rule whose `--keys` is never reached does
/// not pay for the whole bound.
const INITIAL_CELLS: usize = 16;

struct Cell<S> {
    key: u64,
    meta: u8,
    state: S,
}

impl<S: Default> Default for Cell<S> {
    fn default() -> Self {
        Cell {
            key: 0,
            meta: 0,
            state: S::default(),
        }
    }
}

/// Maps a uniformly distributed `x` onto `0..n` (Lemire's multiply-shift:
/// uses the high bits of `x`; the shard is chosen from the low 32 bits, so
/// the two are independent).
fn reduce(x: u64, n: usize) -> usize {
    ((u128::from(x) * n as u128) >> 64) as usize
}

/// `repr(C)`: what a hit reads (the cell array, `cap`, `len`, `changed`)
/// comes first, on the cache line of the shard's lock, so a hit moves one
/// line of shard header between cores, not three.
#[repr(C)]
pub(crate) struct Shard<S> {
    cells: Vec<Cell<S>>,
    /// Most keys this shard holds.
    cap: usize,
    len: usize,
    /// `len` or `evicted` changed since the table last copied them.
    pub(crate) changed: bool,
    /// The last decision on this shard inserted a key: likely a churn, so
    /// the next one starts an insert's loads before its own probe.
    churning: bool,
    /// Table size at the bound; `cells` doubles up to it.
    max_cells: usize,
    /// Probation FIFO: exactly the keys whose cell has `SMALL`, oldest first.
    small: VecDeque<u64>,
    small_target: usize,
    /// CLOCK hand over `cells` for the main queue.
    hand: usize,
    /// Fingerprints of keys recently evicted from probation, direct-mapped
    /// (a newer fingerprint overwrites an older one: recency, approximately).
    /// 0 = empty. Allocated at the first eviction.
    ghost: Vec<u32>,
    pub(crate) evicted: u64,
    /// Keys of main CLOCK may still look at: earned per insert at the
    /// bound, at most `max(cap, SCAN)` (see `evict.rs`).
    credit: usize,
    /// Inserts at the bound that try probation's idle keys before CLOCK:
    /// set after a search of main that found no idle key (see `evict.rs`).
    probation_first: usize,
}

impl<S: KeyState> Shard<S> {
    pub(crate) fn new(cap: usize) -> Self {
        let small_target = (cap / 10).max(1);
        Shard {
            cells: (0..max_cells(cap).min(INITIAL_CELLS))
                .map(|_| Cell::default())
                .collect(),
            max_cells: max_cells(cap),
            cap,
            len: 0,
            changed: false,
            churning: false,
            // The queue never holds more than `small_target` keys (graduation
            // in `insert`), so this is its only allocation.
            small: VecDeque::with_capacity(if cap == 0 { 0 } else { small_target }),
            small_target,
            hand: 0,
            ghost: Vec::new(),
            evicted: 0,
            credit: cap,
            probation_first: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `evicted` sees the state of each key evicted to make room, before
    /// it is dropped; `now` goes to the states' eviction checks.
    pub(crate) fn with<R>(
        &mut self,
        key: u64,
        now: u64,
        f: impl FnOnce(&mut S) -> R,
        evicted: &mut impl FnMut(&mut S),
    ) -> Option<R> {
        if self.cap == 0 {
            return None;
        }
        let preloaded = self.churning && self.len == self.cap;
        if preloaded {
            self.preload_insert(key);
        }
        let i = match self.probe(key) {
            Ok(i) => {
                self.churning = false;
                self.touch(i);
                i
            }
            Err(empty) => {
                self.churning = true;
                self.insert(key, now, empty, preloaded, evicted)?
            }
        };
        Some(f(&mut self.cells[i].state))
    }

    /// Starts loading what an insert at the bound reads besides the new
    /// key's own cell: the likely victim's cell (probation's front key) and
    /// the new key's ghost entry. Issued before the probe, their cache
    /// misses overlap the probe's own instead of following it. Only while
    /// the shard is churning, so that hits do not pay for loads they do not
    /// use. (Also loading the victim's ghost entry measured no faster.)
    fn preload_insert(&self, key: u64) {
        let Some(&front) = self.small.front() else {
            return;
        };
        std::hint::black_box(self.cells[reduce(front, self.cells.len())].meta);
        if !self.ghost.is_empty() {
            std::hint::black_box(self.ghost[self.ghost_at(key).0]);
        }
    }

    pub(crate) fn get<R>(&mut self, key: u64, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        if self.len == 0 {
            return None;
        }
        let i = self.probe(key).ok()?;
        self.touch(i);
        Some(f(&mut self.cells[i].state))
    }

    pub(crate) fn for_each(&self, f: &mut impl FnMut(u64, &S)) {
        for s in &self.cells {
            if s.meta & OCCUPIED != 0 {
                f(s.key, &s.state);
            }
        }
    }

    pub(crate) fn for_each_mut(&mut self, f: &mut impl FnMut(u64, &mut S)) {
        for s in &mut self.cells {
            if s.meta & OCCUPIED != 0 {
                f(s.key, &mut s.state);
            }
        }
    }

    /// `Ok(cell)` holding `key`, or `Err(first empty cell)` on its probe
    /// path. Terminates: there is always an empty cell (`len < cells.len()`).
    fn probe(&self, key: u64) -> Result<usize, usize> {
        let n = self.cells.len();
        let mut i = reduce(key, n);
        loop {
            let s = &self.cells[i];
            if s.meta & OCCUPIED == 0 {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    fn touch(&mut self, i: usize) {
        let m = &mut self.cells[i].meta;
        if *m & FREQ != FREQ {
            *m += 1;
        }
    }

    /// Inserts `key` (absent; `empty` is the empty cell that ended its
    /// probe) with the default state; `None` if the shard is full and no key
    /// could go (`make_room`).
    fn insert(
        &mut self,
        key: u64,
        now: u64,
        empty: usize,
        preloaded: bool,
        evicted: &mut impl FnMut(&mut S),
    ) -> Option<usize> {
        // At the bound, start loading the likely victim's cell (probation's
        // front key) and the ghost entry together: their cache misses then
        // overlap instead of following each other (~15 % of an insert).
        // Already done before the probe if the shard was churning.
        if self.len == self.cap && !preloaded {
            if let Some(&front) = self.small.front() {
                let n = self.cells.len();
                std::hint::black_box(self.cells[reduce(front, n)].meta);
            }
        }
        let main = self.ghost_take(key);
        let mut freed = None;
        if self.len == self.cap {
            freed = self.make_room(now, evicted);
            if freed.is_none() {
                if main {
                    self.ghost_put(key);
                }
                return None;
            }
        }
        let grown = self.grow_if_needed();
        if !main && self.small.len() >= self.small_target {
            // Below the bound nothing is evicted, but probation stays at its
            // size: its oldest key moves on to main (where an untouched one
            // is CLOCK's first candidate later).
            self.graduate_front();
        }
        let i = match freed {
            // Growth moved every cell: probe again.
            _ if grown => match self.probe(key) {
                Ok(i) | Err(i) => i,
            },
            // The eviction's backward shift left exactly one cell empty
            // (`f`) and moved nothing into `empty`. If `f` lies on the key's
            // probe path (between its ideal cell and `empty`), it is now the first
            // empty cell there; otherwise that path is unchanged.
            Some(f) if self.on_path(key, f, empty) => f,
            _ => empty,
        };
        let cell = &mut self.cells[i];
        cell.key = key;
        cell.meta = if main { OCCUPIED } else { OCCUPIED | SMALL };
        cell.state = S::default();
        if !main {
            self.small.push_back(key);
        }
        self.len += 1;
        self.changed = true;
        Some(i)
    }

    /// True if cell `f` lies cyclically in `[ideal cell of key, end)`.
    fn on_path(&self, key: u64, f: usize, end: usize) -> bool {
        let n = self.cells.len();
        let ideal = reduce(key, n);
        let dist = |i: usize| if i >= ideal { i - ideal } else { i + n - ideal };
        dist(f) < dist(end)
    }

    /// Doubles the cell array when it is 2/3 full (up to `max_cells`);
    /// true if it did (every cell moved).
    fn grow_if_needed(&mut self) -> bool {
        let n = self.cells.len();
        if n >= self.max_cells || self.len < n - n / 3 {
            return false;
        }
        let new_n = n.saturating_mul(2).min(self.max_cells);
        let old = std::mem::replace(
            &mut self.cells,
            (0..new_n).map(|_| Cell::default()).collect(),
        );
        for s in old {
            if s.meta & OCCUPIED != 0 {
                if let Err(i) = self.probe(s.key) {
                    self.cells[i] = s;
                }
            }
        }
        self.hand = 0;
        true
    }

    /// Checks the table's invariants (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let n = self.cells.len();
        let occupied = self.cells.iter().filter(|s| s.meta & OCCUPIED != 0).count();
        assert_eq!(occupied, self.len);
        assert!(self.len <= self.cap);
        assert!(self.len < n || n == 0);
        assert!(self.small.len() <= self.small_target);
        let small: Vec<u64> = self
            .cells
            .iter()
            .filter(|s| s.meta & (OCCUPIED | SMALL) == OCCUPIED | SMALL)
            .map(|s| s.key)
            .collect();
        assert_eq!(small.len(), self.small.len());
        for k in small {
            assert!(self.small.contains(&k));
        }
        for (i, s) in self.cells.iter().enumerate() {
            if s.meta & OCCUPIED != 0 {
                assert_eq!(self.probe(s.key), Ok(i), "key unreachable");
            }
        }
    }
}
