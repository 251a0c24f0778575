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

/// Keys of main that CLOCK may look at per insert at the bound, on
/// average: each such insert earns this much scan credit, and a shard keeps
/// at most one pass over its keys' worth (see `make_room`).
pub(crate) const SCAN: usize = 16;

/// What eviction may do with a key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Evictable in S3-FIFO order.
    Idle,
    /// Evicted only when no idle key was found.
    Sticky,
    /// Never evicted.
    Busy,
}

/// One `busy()` call per key looked at (what the scan budget counts), at
/// the time the table call was given.
fn kind<S: KeyState>(s: &S, now: u64) -> Kind {
    if s.busy(now) {
        Kind::Busy
    } else if s.sticky(now) {
        Kind::Sticky
    } else {
        Kind::Idle
    }
}

/// What a CLOCK scan found in its window.
struct Scan {
    /// An idle key of main: a zero counter, or the lowest counter seen.
    idle: Option<usize>,
    /// The sticky key of main with the lowest counter seen.
    sticky: Option<usize>,
}

impl<S: KeyState> Shard<S> {
    /// Evicts one key and returns the cell left empty (after the backward
    /// shift); `None` if no key could go. `evicted` sees the victim's state.
    ///
    /// The order: probation's untouched idle key at its front (while
    /// probation holds its share), then CLOCK's idle key of main, then any
    /// idle key of probation, then a sticky key (of main, else of
    /// probation). `None` only if every key of probation and every key of
    /// main CLOCK looked at is busy: a shard whose keys are never busy always
    /// makes room.
    ///
    /// **After a fruitless search** (CLOCK found no idle key of main), the
    /// next `cap` inserts try probation's idle keys before CLOCK: in a shard
    /// of keys that cannot go, a flood's keys (idle, in probation) then
    /// evict each other at O(1), instead of each paying a search of main
    /// that finds nothing. CLOCK still runs when probation has no idle key,
    /// and ends that mode when it finds one.
    ///
    /// **Bounded work per insert.** CLOCK's search costs `busy()` calls
    /// under the shard's lock, and in a shard of busy or sticky keys the
    /// next idle key of main may be anywhere (a flood of keys touched twice
    /// graduates each to main, alone among keys that cannot go). So CLOCK
    /// spends scan credit, one per key of main looked at: every insert at the
    /// bound earns [`SCAN`], unspent credit is kept up to one pass over the
    /// shard (`cap`, also the initial credit), and when it runs out CLOCK
    /// stops at the best candidate it saw (the idle key with the lowest
    /// counter). So an insert costs O(1) amortized (`SCAN` keys of main plus
    /// its share of probation's, each passing once), and at most one pass
    /// per burst of inserts (the credit is earned during the mode above
    /// too). The price, only in shards of more than `SCAN`
    /// keys: when the window held no idle key, an idle key of main beyond it
    /// waits (a sticky key may go meanwhile, or the insert be refused if
    /// every key looked at is busy); the hand moves on by at least `SCAN`
    /// keys per insert, so it is reached within about two passes (2 × `cap /
    /// SCAN` such inserts: a backward shift can move a key behind the hand).
    pub(super) fn make_room(
        &mut self,
        now: u64,
        evicted: &mut impl FnMut(&mut S),
    ) -> Option<usize> {
        // Probation first while it holds its share: a flood of one-off keys
        // evicts itself and never reaches main.
        while self.small.len() >= self.small_target {
            let Some(key) = self.small.pop_front() else {
                break;
            };
            let Ok(i) = self.probe(key) else { continue };
            let s = &mut self.cells[i];
            if s.meta & FREQ == 0 && kind(&s.state, now) == Kind::Idle {
                return Some(self.evict(i, true, evicted));
            }
            // Touched during probation (or not idle): main, counter restarted.
            s.meta = OCCUPIED;
        }
        self.credit = (self.credit + SCAN).min(self.cap.max(SCAN));
        let mut sticky = None;
        if self.probation_first > 0 {
            self.probation_first -= 1;
            match self.idle_in_probation(now, &mut sticky) {
                Some(i) => return Some(self.evict(i, true, evicted)),
                None => return self.evict_in_main(now, sticky, evicted),
            }
        }
        let scan = self.clock(now);
        if let Some(i) = scan.idle {
            return Some(self.evict(i, false, evicted));
        }
        self.probation_first = self.cap;
        sticky = scan.sticky;
        if let Some(i) = self.idle_in_probation(now, &mut sticky) {
            return Some(self.evict(i, true, evicted));
        }
        // No idle key found: a sticky one goes rather than refuse the new key.
        sticky.map(|i| self.evict(i, false, evicted))
    }

    /// Probation had no idle key (the mode after a fruitless search): CLOCK
    /// over main (which ends the mode if it finds an idle key), else a
    /// sticky key, of main or `sticky` (probation's).
    fn evict_in_main(
        &mut self,
        now: u64,
        sticky: Option<usize>,
        evicted: &mut impl FnMut(&mut S),
    ) -> Option<usize> {
        let scan = self.clock(now);
        if let Some(i) = scan.idle {
            self.probation_first = 0;
            return Some(self.evict(i, false, evicted));
        }
        scan.sticky
            .or(sticky)
            .map(|i| self.evict(i, false, evicted))
    }

    /// The first idle key of probation, touched or not; the keys before it
    /// move to main (the first sticky one noted in `sticky` if unset). Each
    /// key passes here at most once (it leaves probation): O(1) amortized.
    fn idle_in_probation(&mut self, now: u64, sticky: &mut Option<usize>) -> Option<usize> {
        while let Some(key) = self.small.pop_front() {
            let Ok(i) = self.probe(key) else { continue };
            match kind(&self.cells[i].state, now) {
                Kind::Idle => return Some(i),
                Kind::Sticky if sticky.is_none() => *sticky = Some(i),
                _ => {}
            }
            self.cells[i].meta = OCCUPIED;
        }
        None
    }

    /// CLOCK over main, within the shard's scan credit: the first idle key
    /// with a zero counter, decrementing the counters of the idle keys it
    /// passes (the hand stays on it: the backward shift may refill the
    /// cell). When the credit runs out, the idle key with the lowest counter
    /// seen, and the sticky key with the lowest counter seen; the hand is
    /// then past the window.
    fn clock(&mut self, now: u64) -> Scan {
        let n = self.cells.len();
        let mut idle: Option<(u8, usize)> = None;
        let mut sticky: Option<(u8, usize)> = None;
        // Cells passed since the last key of main: a full turn means main
        // is empty (tiny shards, all keys in probation).
        let mut others = 0;
        while self.credit > 0 && others < n {
            if self.hand >= n {
                self.hand = 0;
            }
            let i = self.hand;
            let s = &mut self.cells[i];
            if s.meta & (OCCUPIED | SMALL) != OCCUPIED {
                others += 1;
                self.hand += 1;
                continue;
            }
            others = 0;
            self.credit -= 1;
            let count = s.meta & FREQ;
            match kind(&s.state, now) {
                Kind::Idle if count == 0 => {
                    return Scan {
                        idle: Some(i),
                        sticky: None,
                    }
                }
                Kind::Idle => {
                    s.meta -= 1;
                    if idle.is_none_or(|(c, _)| count - 1 < c) {
                        idle = Some((count - 1, i));
                    }
                }
                Kind::Sticky => {
                    if sticky.is_none_or(|(c, _)| count < c) {
                        sticky = Some((count, i));
                    }
                }
                Kind::Busy => {}
            }
            self.hand += 1;
        }
        Scan {
            idle: idle.map(|(_, i)| i),
            sticky: sticky.map(|(_, i)| i),
        }
    }

    pub(super) fn graduate_front(&mut self) {
        while let Some(key) = self.small.pop_front() {
            if let Ok(i) = self.probe(key) {
                self.cells[i].meta = OCCUPIED;
                return;
            }
        }
    }

    /// Evicts the key in cell `i`; returns the cell left empty.
    fn evict(&mut self, i: usize, remember: bool, evicted: &mut impl FnMut(&mut S)) -> usize {
        evicted(&mut self.cells[i].state);
        let key = self.cells[i].key;
        let empty = self.remove_at(i);
        if remember {
            self.ghost_put(key);
        }
        self.len -= 1;
        self.evicted += 1;
        empty
    }

    /// Empties cell `hole` and closes the gap (backward-shift deletion), so
    /// the table never accumulates tombstones under churn. Returns the cell
    /// left empty at the end (`hole` itself if nothing moved).
    fn remove_at(&mut self, mut hole: usize) -> usize {
        let n = self.cells.len();
        self.cells[hole].state = S::default();
        self.cells[hole].meta = 0;
        let mut j = hole;
        loop {
            j += 1;
            if j == n {
                j = 0;
            }
            if self.cells[j].meta & OCCUPIED == 0 {
                return hole;
            }
            let ideal = reduce(self.cells[j].key, n);
            // The entry at j stays if its ideal cell lies cyclically in (hole, j]:
            // moving it before its ideal cell would make it unreachable.
            let stays = if hole <= j {
                hole < ideal && ideal <= j
            } else {
                hole < ideal || ideal <= j
            };
            if !stays {
                self.cells.swap(hole, j);
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
