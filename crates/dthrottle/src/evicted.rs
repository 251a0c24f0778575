//! Hits of evicted tags, carried to the next report.
//!
//! A tag with unreported hits may be evicted (it is not busy): otherwise a
//! flood of one-off tags, each with one hit, fills the table within one
//! report period and every new client is refused until the next report
//! (issue 21). The evicted tag's name and hits wait here for the next
//! report instead, so peers still learn of them.
//!
//! **Bound.** At most `bound` tags wait, the heaviest: above it the
//! lightest is dropped and counted (the report's `dropped_tags` and
//! `dropped_hits`, and the `evicted_hits_dropped` counter). The callers use
//! `bound` = the most tags a report carries: the report sends at most that
//! many, heaviest first, so a tag dropped here is lighter than every tag
//! that could have been sent in its place; memory is at most that many
//! more tag names (each at most 255 bytes plus ~30 of overhead). What is
//! lost is, within one period, the hits of the lightest evicted tags beyond
//! a report's worth: in a flood, one-off tags of one hit each, for which
//! peers forget one hit (one token of a tag that is not coming back).
//! A client that keeps coming back is seen again and kept (S3-FIFO), and
//! its hits from then on stay in the table.
//!
//! **Per shard.** Evictions happen under a shard's lock, on every thread
//! that inserts: one buffer for the whole table would make every decision
//! of a flood take one limiter-wide lock, serializing the threads. So
//! [`ShardedEvictedHits`] keeps one buffer per shard of the tag table,
//! beside it (its lock is taken only under that shard's lock, or by the
//! report: uncontended), each bounded by its share of `bound` (split as the
//! table splits its keys), merged at report time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use parking_lot::Mutex;

/// The evicted tags' unreported hits, at most `bound`, the heaviest.
#[derive(Debug, Default)]
pub struct EvictedHits {
    /// Min-heap by hits: the lightest is the one dropped.
    heap: BinaryHeap<Reverse<(u32, Box<[u8]>)>>,
    bound: usize,
    dropped_tags: u64,
    dropped_hits: u64,
    dropped_total: u64,
}

/// What [`EvictedHits::take`] hands the report.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    pub entries: Vec<(Box<[u8]>, u32)>,
    /// Tags dropped because the buffer was full, and their hits.
    pub dropped_tags: u64,
    pub dropped_hits: u64,
}

impl EvictedHits {
    pub fn new(bound: usize) -> Self {
        EvictedHits {
            bound,
            ..Default::default()
        }
    }

    /// Keeps `hits` of the evicted `tag` for the next report (O(log bound)).
    pub fn push(&mut self, tag: Box<[u8]>, hits: u32) {
        if hits == 0 || tag.is_empty() {
            return;
        }
        if self.heap.len() < self.bound {
            self.heap.push(Reverse((hits, tag)));
            return;
        }
        let lightest = match self.heap.peek() {
            Some(Reverse((h, _))) if *h < hits => self.heap.pop().map(|Reverse((h, _))| h),
            _ => None,
        };
        let dropped = match lightest {
            Some(h) => {
                self.heap.push(Reverse((hits, tag)));
                h
            }
            None => hits,
        };
        self.dropped_tags += 1;
        self.dropped_hits += u64::from(dropped);
        self.dropped_total += 1;
    }

    /// Everything waiting, and the drops since the last take.
    pub fn take(&mut self) -> Taken {
        let entries = self.heap.drain().map(|Reverse((h, t))| (t, h)).collect();
        Taken {
            entries,
            dropped_tags: std::mem::take(&mut self.dropped_tags),
            dropped_hits: std::mem::take(&mut self.dropped_hits),
        }
    }

    /// Tags dropped because the buffer was full, since it was made.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }
}

/// One buffer on cache lines of its own: threads evicting in neighbouring
/// shards do not share a line.
#[repr(align(128))]
struct Padded(Mutex<EvictedHits>);

/// [`EvictedHits`] split by shard of a tag table: at most `bound` tags in
/// all, the heaviest of each shard's share kept.
pub struct ShardedEvictedHits {
    shards: Box<[Padded]>,
}

impl ShardedEvictedHits {
    /// For a table of `shards` shards (at least one); shard `i` keeps at
    /// most `bound / shards` tags, plus one for the first `bound % shards`,
    /// and at least one if `bound` is not 0: a bound below the shard count
    /// (dthrottled allows `max_report_tags = 1`) would otherwise drop every
    /// hit evicted in most shards. So `max(bound, shards)` tags in all.
    pub fn new(bound: usize, shards: usize) -> Self {
        let n = shards.max(1);
        let least = usize::from(bound > 0);
        let shards = (0..n)
            .map(|i| {
                let share = bound / n + usize::from(i < bound % n);
                Padded(Mutex::new(EvictedHits::new(share.max(least))))
            })
            .collect();
        ShardedEvictedHits { shards }
    }

    /// Keeps `hits` of `tag`, evicted from shard `shard` of the table. Call
    /// it under that shard's lock (its buffer's lock is then uncontended).
    pub fn push(&self, shard: usize, tag: Box<[u8]>, hits: u32) {
        self.buffer(shard).lock().push(tag, hits);
    }

    /// Shard `shard`'s buffer (any index maps to one).
    pub fn buffer(&self, shard: usize) -> &Mutex<EvictedHits> {
        &self.shards[shard % self.shards.len()].0
    }

    /// Every shard's entries and drops since the last take, merged (one
    /// buffer lock at a time, never under a shard's lock).
    pub fn take(&self) -> Taken {
        let mut all = Taken::default();
        for p in self.shards.iter() {
            let t = p.0.lock().take();
            all.entries.extend(t.entries);
            all.dropped_tags += t.dropped_tags;
            all.dropped_hits += t.dropped_hits;
        }
        all
    }

    /// Tags dropped because their shard's buffer was full, since made.
    pub fn dropped_total(&self) -> u64 {
        self.shards.iter().map(|p| p.0.lock().dropped_total()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_heaviest_and_counts_the_rest() {
        let mut e = EvictedHits::new(2);
        for (t, h) in [("a", 1), ("b", 5), ("c", 3), ("d", 1), ("e", 0)] {
            e.push(Box::from(t.as_bytes()), h);
        }
        let mut taken = e.take();
        taken.entries.sort();
        let want: Vec<(Box<[u8]>, u32)> =
            vec![(Box::from(&b"b"[..]), 5), (Box::from(&b"c"[..]), 3)];
        assert_eq!(taken.entries, want);
        assert_eq!((taken.dropped_tags, taken.dropped_hits), (2, 2));
        assert_eq!(e.dropped_total(), 2);
        assert_eq!(e.take(), Taken::default());
        let mut none = EvictedHits::new(0);
        none.push(Box::from(&b"x"[..]), 4);
        assert_eq!((none.take().dropped_hits, none.dropped_total()), (4, 1));
    }

    #[test]
    fn shards_split_the_bound_and_merge() {
        let e = ShardedEvictedHits::new(5, 2); // 3 + 2
        for i in 0..4u32 {
            e.push(0, format!("a{i}").into_bytes().into(), i + 1);
            e.push(1, format!("b{i}").into_bytes().into(), i + 1);
        }
        // Any index maps to a buffer: 7 to shard 1's, full of heavier tags.
        e.push(7, Box::from(&b"b7"[..]), 1);
        let mut taken = e.take();
        taken.entries.sort();
        let names: Vec<&[u8]> = taken.entries.iter().map(|(t, _)| &t[..]).collect();
        let want: [&[u8]; 5] = [b"a1", b"a2", b"a3", b"b2", b"b3"];
        assert_eq!(names, want);
        // a0 (1 hit), b0, b1 and b7 (1 + 2 + 1).
        assert_eq!((taken.dropped_tags, taken.dropped_hits), (4, 5));
        assert_eq!(e.dropped_total(), 4);
        assert_eq!(e.take(), Taken::default());
    }

    #[test]
    fn a_bound_below_the_shard_count_keeps_one_tag_per_shard() {
        let e = ShardedEvictedHits::new(1, 4);
        for i in 0..4 {
            e.push(i, format!("t{i}").into_bytes().into(), 1);
        }
        let taken = e.take();
        assert_eq!((taken.entries.len(), taken.dropped_tags), (4, 0));
        // A bound of 0 keeps nothing.
        let none = ShardedEvictedHits::new(0, 4);
        none.push(2, Box::from(&b"x"[..]), 3);
        assert_eq!(none.take().dropped_hits, 3);
    }
}
