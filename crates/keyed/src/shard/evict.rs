//! Eviction for a shard at its bound: S3-FIFO's probation queue, the CLOCK
//! over main, backward-shift deletion, and the ghost table (see `shard.rs`
//! for the design).

use super::{reduce, Shard, FREQ, OCCUPIED, SMALL};
use crate::KeyState;

/// A second, independent hash of a key for the ghost table (SplitMix64's
/// finaliser).
fn remix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Slots an insert looks at for a key to evict once a sweep found no idle
/// key (see `make_room`).
const STEPS: usize = 8;

/// Evictable in S3-FIFO order: neither busy nor sticky.
fn idle<S: KeyState>(s: &S) -> bool {
    !s.busy() && !s.sticky()
}

impl<S: KeyState> Shard<S> {
    /// Evicts one key and returns the slot left empty (after the backward
    /// shift); `None` if no key could go. An idle key if there is one, in
    /// S3-FIFO order; else a sticky one. `evicted` sees the victim's state.
    ///
    /// **The worst case is not repeated.** When no key of main is idle,
    /// CLOCK sweeps the whole shard (n slots) to learn it. Without a memory
    /// of that, a flood of new keys into a shard of busy or sticky keys
    /// would pay the sweep on every insert, under the shard's lock (CPU
    /// amplification). So a sweep that found no idle key of main sets
    /// `idle_skip = cap`: the next `cap` inserts at the bound skip that
    /// search and look at most [`STEPS`] slots on from the hand for a key
    /// that is not busy (the hand moves on, so successive inserts cover the
    /// shard). A flood thus costs O(1) per insert: one sweep per `cap`
    /// inserts, plus at most `STEPS` slots each. The price: in that mode an
    /// insert may evict a sticky key while an idle one (freed meanwhile
    /// without the table being told: a slot given back, debt ending) waits
    /// further on, or be refused while a key has become free; the hand
    /// reaches every slot within `n / STEPS` inserts. This only follows a
    /// sweep that found no idle key, and probation is still searched first,
    /// so new (idle) keys still evict each other.
    pub(super) fn make_room(&mut self, evicted: &mut impl FnMut(&mut S)) -> Option<usize> {
        // Probation first while it holds its share: a flood of one-off keys
        // evicts itself and never reaches main.
        while self.small.len() >= self.small_target {
            let Some(key) = self.small.pop_front() else {
                break;
            };
            let Ok(i) = self.probe(key) else { continue };
            let s = &mut self.slots[i];
            if s.meta & FREQ == 0 && idle(&s.state) {
                return Some(self.evict(i, true, evicted));
            }
            // Touched during probation (or busy): main, counter restarted.
            s.meta = OCCUPIED;
        }
        let steps = if self.idle_skip > 0 {
            self.idle_skip -= 1;
            STEPS
        } else {
            if let Some(i) = self.clock() {
                return Some(self.evict(i, false, evicted));
            }
            self.idle_skip = self.cap;
            // Main has no idle key: any idle probation key goes, touched or
            // not; the others move to main.
            while let Some(key) = self.small.pop_front() {
                let Ok(i) = self.probe(key) else { continue };
                if idle(&self.slots[i].state) {
                    return Some(self.evict(i, true, evicted));
                }
                self.slots[i].meta = OCCUPIED;
            }
            // This insert has paid for a sweep already: one more may follow.
            self.slots.len()
        };
        // No idle key: a sticky one goes rather than refuse the new key.
        if let Some(i) = self.any_unbusy(steps) {
            return Some(self.evict(i, false, evicted));
        }
        // Nor in main: probation's keys (below its share, new since the
        // sweep) go if not busy, or move to main; each key is passed here
        // once per insert, so this stays O(1) amortized.
        while let Some(key) = self.small.pop_front() {
            let Ok(i) = self.probe(key) else { continue };
            if !self.slots[i].state.busy() {
                return Some(self.evict(i, true, evicted));
            }
            self.slots[i].meta = OCCUPIED;
        }
        None
    }

    /// The first key of main among `steps` slots from the hand that is not
    /// busy (sticky or idle). The hand stays on it (the backward shift may
    /// refill the slot), or moves past the slots looked at.
    fn any_unbusy(&mut self, steps: usize) -> Option<usize> {
        let n = self.slots.len();
        for _ in 0..steps.min(n) {
            if self.hand >= n {
                self.hand = 0;
            }
            let s = &self.slots[self.hand];
            if s.meta & (OCCUPIED | SMALL) == OCCUPIED && !s.state.busy() {
                return Some(self.hand);
            }
            self.hand += 1;
        }
        None
    }

    /// CLOCK over main: the first idle key with a zero counter, decrementing
    /// the counters it passes. `None` after a full sweep that saw no idle key
    /// of main (the counters saturate at 3, so at most 4 sweeps otherwise).
    fn clock(&mut self) -> Option<usize> {
        let n = self.slots.len();
        let mut swept = 0;
        let mut saw_idle = false;
        loop {
            if self.hand >= n {
                self.hand = 0;
            }
            let s = &mut self.slots[self.hand];
            if s.meta & (OCCUPIED | SMALL) == OCCUPIED && idle(&s.state) {
                if s.meta & FREQ == 0 {
                    // The hand stays: the backward shift may refill this slot.
                    return Some(self.hand);
                }
                s.meta -= 1;
                saw_idle = true;
            }
            self.hand += 1;
            swept += 1;
            if swept == n {
                if !saw_idle {
                    return None;
                }
                swept = 0;
                saw_idle = false;
            }
        }
    }

    pub(super) fn graduate_front(&mut self) {
        while let Some(key) = self.small.pop_front() {
            if let Ok(i) = self.probe(key) {
                self.slots[i].meta = OCCUPIED;
                return;
            }
        }
    }

    /// Evicts the key in slot `i`; returns the slot left empty.
    fn evict(&mut self, i: usize, remember: bool, evicted: &mut impl FnMut(&mut S)) -> usize {
        evicted(&mut self.slots[i].state);
        let key = self.slots[i].key;
        let empty = self.remove_at(i);
        if remember {
            self.ghost_put(key);
        }
        self.len -= 1;
        self.evicted += 1;
        empty
    }

    /// Empties slot `hole` and closes the gap (backward-shift deletion), so
    /// the table never accumulates tombstones under churn. Returns the slot
    /// left empty at the end (`hole` itself if nothing moved).
    fn remove_at(&mut self, mut hole: usize) -> usize {
        let n = self.slots.len();
        self.slots[hole].state = S::default();
        self.slots[hole].meta = 0;
        let mut j = hole;
        loop {
            j += 1;
            if j == n {
                j = 0;
            }
            if self.slots[j].meta & OCCUPIED == 0 {
                return hole;
            }
            let home = reduce(self.slots[j].key, n);
            // The entry at j stays if its home lies cyclically in (hole, j]:
            // moving it before its home would make it unreachable.
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots.swap(hole, j);
                hole = j;
            }
        }
    }

    pub(super) fn ghost_at(&self, key: u64) -> (usize, u32) {
        let m = remix(key);
        (reduce(m, self.ghost.len()), (m as u32) | 1)
    }

    pub(super) fn ghost_put(&mut self, key: u64) {
        if self.ghost.is_empty() {
            self.ghost = vec![0; self.cap];
        }
        let (i, fp) = self.ghost_at(key);
        self.ghost[i] = fp;
    }

    pub(super) fn ghost_take(&mut self, key: u64) -> bool {
        if self.ghost.is_empty() {
            return false;
        }
        let (i, fp) = self.ghost_at(key);
        let hit = self.ghost[i] == fp;
        if hit {
            self.ghost[i] = 0;
        }
        hit
    }
}
