//! The `keys` command's view of a rule's table: its N hottest IPs in a
//! fixed order ([`Held`]'s), found in one pass that locks one shard at a
//! time and keeps only the best N so far ([`Best`]): memory is O(N)
//! however many IPs the table holds.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::net::IpAddr;

use limits::{Clock, Nanos};

use super::Throttler;
use crate::state::{Phase, View};
use crate::Client;

/// One IP the table holds, as `keys` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// What the state is kept for: the address masked to `--key-prefix`
    /// (`show`, `key` and `unban` take it back), or every unknown client.
    pub client: Client,
    /// `client`'s prefix length; `None` for unknown.
    pub prefix: Option<u8>,
    pub view: View,
}

/// [`Held::rank`]: the state, a ban's time left, violations, delay,
/// delayed requests, time left, then the address (smaller is greater).
type Rank = (u8, Nanos, u32, Nanos, u32, Nanos, Reverse<(u8, u128)>);

impl Held {
    /// Greater is hotter: banned, then throttled, then probation, then
    /// allowed (still holding delayed requests); a ban with more time left
    /// first; then more violations, a longer delay, more requests delayed
    /// now, more time left in the state; ties by address, the smaller first
    /// (IPv4 before IPv6, unknown last), so the order is total.
    fn rank(&self) -> Rank {
        let v = &self.view;
        let phase = match v.phase {
            Phase::Allowed => 0,
            Phase::Probation => 1,
            Phase::Throttled => 2,
            Phase::Banned => 3,
        };
        let ban_left = match v.phase {
            Phase::Banned => v.remaining,
            _ => 0,
        };
        let addr = match self.client {
            Client::Addr(IpAddr::V4(a)) => (0, u128::from(u32::from(a))),
            Client::Addr(IpAddr::V6(a)) => (1, u128::from(a)),
            Client::Unknown => (2, 0),
        };
        (
            phase,
            ban_left,
            v.violations,
            v.delay,
            v.delayed,
            v.remaining,
            Reverse(addr),
        )
    }

    /// Worth listing: an allowed IP with no delayed request holds nothing
    /// that an IP the table does not hold lacks.
    fn listed(v: &View) -> bool {
        v.phase != Phase::Allowed || v.delayed > 0
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The greatest `n` of the items pushed: a min-heap of at most `n` whose
/// root is the weakest kept, replaced when a greater item comes.
pub struct Best<T: Ord> {
    n: usize,
    heap: BinaryHeap<Reverse<T>>,
}

impl<T: Ord> Best<T> {
    pub fn new(n: usize) -> Best<T> {
        Best {
            n,
            // Bounded however large n is asked: the heap grows as items come.
            heap: BinaryHeap::with_capacity(n.min(1024)),
        }
    }

    pub fn push(&mut self, item: T) {
        if self.heap.len() < self.n {
            self.heap.push(Reverse(item));
        } else if self
            .heap
            .peek()
            .is_some_and(|Reverse(weakest)| item > *weakest)
        {
            self.heap.pop();
            self.heap.push(Reverse(item));
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The items kept, greatest first.
    pub fn into_sorted(self) -> Vec<T> {
        // Ascending by Reverse: descending by the items' own order.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(t)| t)
            .collect()
    }
}

impl<C: Clock> Throttler<C> {
    /// The `n` hottest IPs the table holds, hottest first (see [`Held`]);
    /// allowed IPs with no delayed request are left out. Visits every
    /// state, one shard's lock at a time: off request paths only.
    pub fn top(&self, n: usize) -> Vec<Held> {
        let now = self.clock.now();
        let p = self.current.load().opts.params;
        let mut best = Best::new(n);
        self.table.for_each(|_, s| {
            let Some(client) = s.holder() else { return };
            let view = s.view(now, &p);
            if Held::listed(&view) {
                let (client, prefix) = self.unit(client);
                best.push(Held {
                    client,
                    prefix,
                    view,
                });
            }
        });
        best.into_sorted()
    }
}
