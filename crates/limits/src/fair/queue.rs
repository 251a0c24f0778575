//! The scheduling of a fair limiter, under its lock: per-flow queues, the
//! round-robin ring, shares and borrowing, and the sweep of idle flows
//! (the module doc of [`crate::fair`] states the rules). [`FairQueue`]
//! decides; `hand_off.rs` applies its decisions to a [`Slots`](crate::Slots).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::entry::Entry;

/// One flow's slots and weight, as the weights file gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowWeight {
    /// Slots this flow may hold; `None`: [`FairConfig::flow_slots`] or the fair share.
    pub slots: Option<u32>,
    /// Turns in a row in the round-robin, and its part of the fair share (≥ 1).
    pub weight: u32,
}

impl Default for FlowWeight {
    fn default() -> Self {
        FlowWeight {
            slots: None,
            weight: 1,
        }
    }
}

/// How a fair limiter shares its slots; changeable live ([`Slots::set_fair`](crate::Slots::set_fair)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FairConfig {
    /// Slots one flow may hold; `None`: its fair share of the active flows.
    pub flow_slots: Option<u32>,
    /// Never more than the share, even on an idle limiter (no borrowing).
    pub strict: bool,
    /// A flow at its share is refused at once instead of queued.
    pub reject_over: bool,
    /// Flows (by key) with their own slots or weight.
    pub weights: HashMap<u64, FlowWeight>,
}

/// Flow keys are already keyed hashes of the client's bytes (the caller
/// hashes them with a secret seed), so the map only mixes them: a second
/// SipHash per lookup would cost more than the rest of an admission.
#[derive(Default)]
pub(super) struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing: the top bits (which hashbrown uses) depend on all bits.
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(super) type FlowMap<W> = HashMap<u64, Flow<W>, BuildHasherDefault<Mix>>;

pub(super) struct Flow<W> {
    pub(super) held: u32,
    /// Entries of `queue` not yet taken (a cancel in flight may still count).
    pub(super) live: u32,
    pub(super) queue: VecDeque<Arc<Entry<W>>>,
    pub(super) w: FlowWeight,
    /// Turns left before it goes to the back of the ring.
    pub(super) credit: u32,
    pub(super) in_ring: bool,
    /// Counted in `active_flows` and `total_weight` (it holds or waits).
    pub(super) counted: bool,
}

impl<W> Flow<W> {
    pub(super) fn new(w: FlowWeight) -> Self {
        Flow {
            held: 0,
            live: 0,
            queue: VecDeque::new(),
            w,
            credit: w.weight,
            in_ring: false,
            counted: false,
        }
    }
}

pub(crate) struct FairQueue<W> {
    pub(super) cfg: FairConfig,
    /// The flows that hold or wait, and some idle ones, kept so that a flow
    /// that comes and goes costs a lookup, not an insert and a removal.
    pub(super) flows: FlowMap<W>,
    /// Flows with waiters, in round-robin order, each at most once. A flow
    /// whose last waiter left stays (`ring_dead`) until `pick` reaches it or
    /// the dead outnumber the live: a cancel costs O(1), not a ring scan.
    pub(super) ring: VecDeque<u64>,
    /// Flows in `ring` with no live waiter.
    pub(super) ring_dead: usize,
    /// Queue places shared by the flows' waiters (`u32::MAX`: uncapped).
    pub(super) places: u32,
    /// Flows that hold or wait, and the sum of their weights.
    pub(super) active_flows: u32,
    pub(super) total_weight: u64,
    pub(super) borrowed: u64,
    pub(super) flow_rejected: u64,
    /// Emptied queues of forgotten flows, reused by new ones.
    pub(super) spare: Vec<VecDeque<Arc<Entry<W>>>>,
    /// Flows and ring places visited by scans (tests bound the work).
    #[cfg(test)]
    pub(crate) visits: u64,
}

/// Shrinks a map, deque or vector whose capacity is over 4 × its length
/// (to 2 ×; small ones are left alone).
macro_rules! shrink {
    ($c:expr) => {
        if $c.capacity() > 4 * $c.len().max(8) {
            let len = $c.len();
            $c.shrink_to(2 * len);
        }
    };
}

/// Most spare queues kept.
const SPARE_QUEUES: usize = 64;
/// Idle flows kept beyond the active ones before a sweep forgets them.
pub(super) const IDLE_KEPT: usize = 64;

impl<W> FairQueue<W> {
    pub(crate) fn new(cfg: FairConfig) -> Self {
        FairQueue {
            cfg,
            flows: FlowMap::default(),
            ring: VecDeque::new(),
            ring_dead: 0,
            places: u32::MAX,
            active_flows: 0,
            total_weight: 0,
            borrowed: 0,
            flow_rejected: 0,
            spare: Vec::new(),
            #[cfg(test)]
            visits: 0,
        }
    }

    #[cfg(test)]
    fn visit(&mut self, n: usize) {
        self.visits += n as u64;
    }
    #[cfg(not(test))]
    #[inline(always)]
    fn visit(&mut self, _: usize) {}

    pub(super) fn weight_of(&self, key: u64) -> FlowWeight {
        if self.cfg.weights.is_empty() {
            return FlowWeight::default();
        }
        let mut w = self.cfg.weights.get(&key).copied().unwrap_or_default();
        w.weight = w.weight.max(1);
        w
    }

    pub(super) fn share(&self, w: FlowWeight, limit: u32, total_weight: u64) -> u32 {
        share(w, self.cfg.flow_slots, limit, total_weight)
    }

    /// After `key` gave back a slot or lost a waiter: uncounted if it now
    /// neither holds nor waits, and idle flows swept out once they outnumber
    /// the active ones (memory follows the flows in use).
    pub(super) fn settle(&mut self, key: u64) {
        if let Some(f) = self.flows.get_mut(&key) {
            if f.counted && f.held == 0 && f.live == 0 {
                f.counted = false;
                self.active_flows -= 1;
                self.total_weight -= u64::from(f.w.weight);
            }
        }
        self.sweep();
    }

    /// Forgets idle flows (neither holding, waiting nor in the ring) once
    /// they outnumber the active ones. Flows in the ring stay: `pick` looks
    /// them up. The kept flows are at most 2 × active + 32 (`ring_dead` is
    /// at most the live ring flows, or 32), so a sweep frees at least 32
    /// places and its cost, the map's capacity, is amortized over them.
    #[inline]
    pub(super) fn sweep(&mut self) {
        if self.flows.len() > 2 * self.active_flows as usize + IDLE_KEPT {
            self.sweep_idle();
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep_idle(&mut self) {
        self.visit(self.flows.capacity());
        let spare = &mut self.spare;
        self.flows.retain(|_, f| {
            let keep = f.counted || f.in_ring;
            if !keep && spare.len() < SPARE_QUEUES && (1..=64).contains(&f.queue.capacity()) {
                f.queue.clear();
                spare.push(std::mem::take(&mut f.queue));
            }
            keep
        });
        // A burst's capacity would make every later sweep scan it.
        shrink!(self.flows);
        shrink!(self.ring);
        shrink!(self.spare);
    }

    /// `flow` lost its last waiter while in the ring: counted dead, and the
    /// ring compacted once the dead outnumber the live (amortized O(1)).
    pub(super) fn died_in_ring(&mut self) {
        self.ring_dead += 1;
        if self.ring_dead > 32 && self.ring_dead * 2 > self.ring.len() {
            self.visit(self.ring.len());
            let flows = &mut self.flows;
            self.ring.retain(|k| match flows.get_mut(k) {
                Some(f) if f.live > 0 => true,
                Some(f) => {
                    f.in_ring = false;
                    false
                }
                None => false,
            });
            self.ring_dead = 0;
            shrink!(self.ring);
        }
    }

    /// Some flow with waiters is under its share (it should get a free slot).
    /// Stops at the first; flows at their share hold a slot each, so at most
    /// `limit` live ones are passed over (and the dead, at most as many as
    /// the live or 32).
    pub(super) fn entitled_waiter(&mut self, limit: u32) -> bool {
        let (flow_slots, tw) = (self.cfg.flow_slots, self.total_weight);
        let mut seen = 0;
        let found = self.ring.iter().any(|k| {
            seen += 1;
            self.flows.get(k).is_some_and(|f| {
                f.live > 0 && (f.held == 0 || f.held < share(f.w, flow_slots, limit, tw))
            })
        });
        self.visit(seen);
        found
    }

    /// The next waiter to admit, if a slot is free: the first flow in ring
    /// order under its share; else (not strict) the first flow (it borrows).
    /// Returns its flow and the waiter (taken out of the queue).
    pub(super) fn pick(&mut self, limit: u32, active: u32) -> Option<(u64, W)> {
        if active >= limit {
            return None;
        }
        let (flow_slots, tw) = (self.cfg.flow_slots, self.total_weight);
        // Round-robin: a flow at its share passes its turn (to the back);
        // once every flow has passed, the first borrows (unless strict).
        // Bounded: a round of passes, then each step takes a waiter or drops
        // a flow whose waiters all left.
        let mut passed = 0;
        loop {
            let &key = self.ring.front()?;
            self.visit(1);
            // Kept by `sweep` while in the ring.
            let f = self.flows.get_mut(&key).expect("ring flows exist");
            if f.live == 0 {
                // Its waiters left (a lazy removal): out of the ring now.
                f.in_ring = false;
                self.ring.pop_front();
                self.ring_dead -= 1;
                continue;
            }
            // Every share is at least 1: no division for an idle flow.
            let entitled = f.held == 0 || f.held < share(f.w, flow_slots, limit, tw);
            if !entitled && passed < self.ring.len() {
                self.ring.rotate_left(1);
                passed += 1;
                continue;
            }
            if !entitled && self.cfg.strict {
                return None;
            }
            let mut got = None;
            while let Some(e) = f.queue.pop_front() {
                if let Some(w) = e.take() {
                    got = Some(w);
                    break;
                }
            }
            let Some(w) = got else {
                // Cancels in flight took them; they fix `live` themselves.
                f.in_ring = false;
                self.ring.pop_front();
                continue;
            };
            f.live -= 1;
            f.held += 1;
            f.credit = f.credit.saturating_sub(1);
            if f.live == 0 {
                f.queue.clear();
                f.in_ring = false;
                self.ring.pop_front();
            } else if f.credit == 0 {
                f.credit = f.w.weight;
                self.ring.rotate_left(1);
            }
            if !entitled {
                self.borrowed += 1;
            }
            return Some((key, w));
        }
    }
}

/// Most waiters a flow of weight `w` may have: its part of `places` queue
/// places by weight among the active flows (`total_weight`), at least 1;
/// `places == u32::MAX`: uncapped.
pub(super) fn queue_part(places: u32, w: FlowWeight, total_weight: u64) -> u32 {
    if places == u32::MAX {
        return u32::MAX;
    }
    let part = (u64::from(places) * u64::from(w.weight)).div_ceil(total_weight.max(1));
    u32::try_from(part).unwrap_or(u32::MAX).max(1)
}

/// A flow's slots: its own, the rule's `flow_slots`, or its fair share of
/// `limit` by weight among the active flows (`total_weight`); at least 1.
pub(super) fn share(w: FlowWeight, flow_slots: Option<u32>, limit: u32, total_weight: u64) -> u32 {
    let s = w.slots.or(flow_slots).unwrap_or_else(|| {
        let fair = (u64::from(limit) * u64::from(w.weight)).div_ceil(total_weight.max(1));
        u32::try_from(fair).unwrap_or(u32::MAX)
    });
    s.max(1)
}
