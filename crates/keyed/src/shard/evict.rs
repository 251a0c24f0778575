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

impl<S: KeyState> Shard<S> {
    /// Evicts one idle key and returns the slot left empty (after the
    /// backward shift); `None` if every key is busy.
    pub(super) fn make_room(&mut self) -> Option<usize> {
        // Probation first while it holds its share: a flood of one-off keys
        // evicts itself and never reaches main.
        while self.small.len() >= self.small_target {
            let Some(key) = self.small.pop_front() else {
                break;
            };
            let Ok(i) = self.probe(key) else { continue };
            let s = &mut self.slots[i];
            if s.meta & FREQ == 0 && !s.state.busy() {
                return Some(self.evict(i, true));
            }
            // Touched during probation (or busy): main, counter restarted.
            s.meta = OCCUPIED;
        }
        if let Some(i) = self.clock() {
            return Some(self.evict(i, false));
        }
        // Main is all busy: any idle probation key goes, touched or not.
        while let Some(key) = self.small.pop_front() {
            let Ok(i) = self.probe(key) else { continue };
            if !self.slots[i].state.busy() {
                return Some(self.evict(i, true));
            }
            self.slots[i].meta = OCCUPIED;
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
            if s.meta & (OCCUPIED | SMALL) == OCCUPIED && !s.state.busy() {
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
    fn evict(&mut self, i: usize, remember: bool) -> usize {
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
