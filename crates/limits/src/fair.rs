//! Fair shares of a limiter's slots between flows (OMERO's per-session,
//! per-user and per-group throttling strategies).
//!
//! A fair [`Slots`] keeps one FIFO per flow (a client key) instead of one
//! for everybody, and hands a freed slot to the next flow in round-robin
//! order (weighted: a flow of weight `w` is served up to `w` times in a row),
//! so a flow with 100 waiters delays another flow's first waiter by at most
//! one turn, not by its whole backlog. Within a flow the order never changes.
//!
//! - **Slots per flow** (its share): set per flow (weights file), for all
//!   ([`FairConfig::flow_slots`]), or by default the fair share
//!   `ceil(limit × weight / total weight of the flows holding or waiting)`.
//! - **Borrowing** (not [`FairConfig::strict`]): a flow at its share may take
//!   an idle slot when no flow under its share waits. A freed slot goes first
//!   to a waiting flow under its share (the borrowed slot is repaid); holders
//!   are never preempted. Strict: a flow never holds more than its share.
//! - **Over its share** ([`FairConfig::reject_over`]): refused at once
//!   ([`FlowTry::Over`]), or queued in its flow (the caller bounds the wait).
//!
//! Only flows that hold or wait for a slot are kept: at most `limit` plus
//! the waiters, which the caller bounds (queue places). Everything runs
//! under one lock per limiter; scans are bounded by the flows at their
//! share, which hold a slot each (at most `limit`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::slots::{Entry, Permit, Slots, Ticket, Waiter, WAITING};

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

/// How a fair limiter shares its slots; changeable live ([`Slots::set_fair`]).
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

/// Counters of a fair limiter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairStats {
    /// Flows holding or waiting for a slot now.
    pub flows: u32,
    /// Slots given to a flow already at its share (so far).
    pub borrowed: u64,
    /// Requests refused because their flow was at its share (so far).
    pub flow_rejected: u64,
}

/// One flow's state (for tests and reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowState {
    pub held: u32,
    pub waiting: u32,
    pub share: u32,
}

/// The outcome of [`Slots::try_acquire_flow`].
pub enum FlowTry<W: Waiter> {
    /// A slot, held by the flow.
    Go(Permit<W>),
    /// No slot for the flow now: queue it ([`Slots::enqueue_flow`]).
    Wait,
    /// The flow is at its share and the limiter refuses over-users.
    Over,
}

impl<W: Waiter> FlowTry<W> {
    pub fn permit(self) -> Option<Permit<W>> {
        match self {
            FlowTry::Go(p) => Some(p),
            _ => None,
        }
    }
}

/// Flow keys are already keyed hashes of the client's bytes (the caller
/// hashes them with a secret seed), so the map only mixes them: a second
/// SipHash per lookup would cost more than the rest of an admission.
#[derive(Default)]
struct Mix(u64);

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

type FlowMap<W> = HashMap<u64, Flow<W>, BuildHasherDefault<Mix>>;

struct Flow<W> {
    held: u32,
    /// Entries of `queue` not yet taken (a cancel in flight may still count).
    live: u32,
    queue: VecDeque<Arc<Entry<W>>>,
    w: FlowWeight,
    /// Turns left before it goes to the back of the ring.
    credit: u32,
    in_ring: bool,
    /// Counted in `active_flows` and `total_weight` (it holds or waits).
    counted: bool,
}

impl<W> Flow<W> {
    fn new(w: FlowWeight) -> Self {
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
    cfg: FairConfig,
    /// The flows that hold or wait, and some idle ones, kept so that a flow
    /// that comes and goes costs a lookup, not an insert and a removal.
    flows: FlowMap<W>,
    /// Flows with waiters, in round-robin order, each at most once.
    ring: VecDeque<u64>,
    /// Flows that hold or wait, and the sum of their weights.
    active_flows: u32,
    total_weight: u64,
    borrowed: u64,
    flow_rejected: u64,
    /// Emptied queues of forgotten flows, reused by new ones.
    spare: Vec<VecDeque<Arc<Entry<W>>>>,
}

/// Most spare queues kept.
const SPARE_QUEUES: usize = 64;
/// Idle flows kept beyond the active ones before a sweep forgets them.
const IDLE_KEPT: usize = 64;

impl<W> FairQueue<W> {
    pub(crate) fn new(cfg: FairConfig) -> Self {
        FairQueue {
            cfg,
            flows: FlowMap::default(),
            ring: VecDeque::new(),
            active_flows: 0,
            total_weight: 0,
            borrowed: 0,
            flow_rejected: 0,
            spare: Vec::new(),
        }
    }

    fn weight_of(&self, key: u64) -> FlowWeight {
        if self.cfg.weights.is_empty() {
            return FlowWeight::default();
        }
        let mut w = self.cfg.weights.get(&key).copied().unwrap_or_default();
        w.weight = w.weight.max(1);
        w
    }

    fn share(&self, w: FlowWeight, limit: u32, total_weight: u64) -> u32 {
        share(w, self.cfg.flow_slots, limit, total_weight)
    }

    /// `key`'s flow (made if new), counted as active: the caller is about
    /// to give it a slot or a waiter.
    fn active_flow(&mut self, key: u64) -> &mut Flow<W> {
        let w = self.weight_of(key);
        let f = self.flows.entry(key).or_insert_with(|| Flow::new(w));
        if !f.counted {
            f.counted = true;
            self.active_flows += 1;
            self.total_weight += u64::from(f.w.weight);
        }
        f
    }

    /// After `key` gave back a slot or lost a waiter: uncounted if it now
    /// neither holds nor waits, and idle flows swept out once they outnumber
    /// the active ones (memory follows the flows in use).
    fn settle(&mut self, key: u64) {
        if let Some(f) = self.flows.get_mut(&key) {
            if f.counted && f.held == 0 && f.live == 0 {
                f.counted = false;
                self.active_flows -= 1;
                self.total_weight -= u64::from(f.w.weight);
            }
        }
        self.sweep();
    }

    fn sweep(&mut self) {
        if self.flows.len() > 2 * self.active_flows as usize + IDLE_KEPT {
            let spare = &mut self.spare;
            self.flows.retain(|_, f| {
                if !f.counted
                    && spare.len() < SPARE_QUEUES
                    && (1..=64).contains(&f.queue.capacity())
                {
                    f.queue.clear();
                    spare.push(std::mem::take(&mut f.queue));
                }
                f.counted
            });
        }
    }

    /// Drops the ring's first flow (it has no waiter left to give).
    fn pop_ring(&mut self) {
        if let Some(key) = self.ring.pop_front() {
            if let Some(f) = self.flows.get_mut(&key) {
                f.in_ring = false;
            }
        }
    }

    /// The next waiter to admit, if a slot is free: the first flow in ring
    /// order under its share; else (not strict) the first flow (it borrows).
    /// Returns its flow and the waiter (taken out of the queue).
    fn pick(&mut self, limit: u32, active: u32) -> Option<(u64, W)> {
        if active >= limit {
            return None;
        }
        // Each round either returns or drops a flow whose entries all left.
        for _ in 0..=self.ring.len() {
            let tw = self.total_weight;
            // Round-robin: flows at their share pass their turn (to the back).
            let mut entitled = false;
            for _ in 0..self.ring.len() {
                let f = &self.flows[&self.ring[0]];
                // Every share is at least 1: no division for an idle flow.
                if f.held == 0 || f.held < self.share(f.w, limit, tw) {
                    entitled = true;
                    break;
                }
                self.ring.rotate_left(1);
            }
            let borrowed = match entitled {
                true => false,
                false if !self.cfg.strict && !self.ring.is_empty() => true,
                false => return None,
            };
            let key = self.ring[0];
            let f = self.flows.get_mut(&key).expect("ring flows exist");
            let mut got = None;
            while let Some(e) = f.queue.pop_front() {
                if let Some(w) = e.take() {
                    got = Some(w);
                    break;
                }
            }
            let Some(w) = got else {
                // Cancels in flight took them; they fix `live` themselves.
                self.pop_ring();
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
            if borrowed {
                self.borrowed += 1;
            }
            return Some((key, w));
        }
        None
    }
}

/// A flow's slots: its own, the rule's `flow_slots`, or its fair share of
/// `limit` by weight among the active flows (`total_weight`); at least 1.
fn share(w: FlowWeight, flow_slots: Option<u32>, limit: u32, total_weight: u64) -> u32 {
    let s = w.slots.or(flow_slots).unwrap_or_else(|| {
        let fair = (u64::from(limit) * u64::from(w.weight)).div_ceil(total_weight.max(1));
        u32::try_from(fair).unwrap_or(u32::MAX)
    });
    s.max(1)
}

/// `active`/`waiting` of a fair limiter change only under its lock: a plain
/// load and store, cheaper than a read-modify-write, cannot lose an update.
fn add(counter: &std::sync::atomic::AtomicU32, delta: i32) {
    let v = counter.load(Ordering::Relaxed).wrapping_add_signed(delta);
    counter.store(v, Ordering::Release);
}

impl<W: Waiter> Slots<W> {
    /// A limiter of `limit` slots shared fairly between flows.
    pub fn fair(limit: u32, cfg: FairConfig) -> Arc<Self> {
        Self::build(limit, Some(Mutex::new(FairQueue::new(cfg))))
    }

    /// True for a limiter made by [`Slots::fair`].
    pub fn is_fair(&self) -> bool {
        self.fair.is_some()
    }

    /// Changes the sharing of a live fair limiter (no-op otherwise). A larger
    /// share admits waiters at once; a smaller one preempts nobody.
    pub fn set_fair(self: &Arc<Self>, cfg: FairConfig) {
        let Some(fair) = &self.fair else { return };
        {
            let mut q = fair.lock();
            q.cfg = cfg;
            let mut total = 0;
            let keys: Vec<u64> = q.flows.keys().copied().collect();
            for k in keys {
                let w = q.weight_of(k);
                let f = q.flows.get_mut(&k).expect("listed above");
                f.w = w;
                f.credit = f.credit.clamp(1, w.weight);
                if f.counted {
                    total += u64::from(w.weight);
                }
            }
            q.total_weight = total;
        }
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.dispatch();
        }
    }

    /// Takes a slot for `flow` if it may have one now (see the module doc).
    /// On a limiter that is not fair, `flow` is ignored.
    pub fn try_acquire_flow(self: &Arc<Self>, flow: u64) -> FlowTry<W> {
        let Some(fair) = &self.fair else {
            return self.try_acquire().map_or(FlowTry::Wait, FlowTry::Go);
        };
        let limit = self.limit.load(Ordering::SeqCst);
        let mut q = fair.lock();
        let q = &mut *q;
        let active = self.active.load(Ordering::Relaxed);
        let w = q.weight_of(flow);
        // One lookup: a flow refused a slot now stays (idle) until a sweep.
        let f = q.flows.entry(flow).or_insert_with(|| Flow::new(w));
        let tw = q.total_weight + if f.counted { 0 } else { u64::from(f.w.weight) };
        let over = f.held > 0 && f.held >= share(f.w, q.cfg.flow_slots, limit, tw);
        // A flow with waiters never overtakes them.
        if active < limit && f.live == 0 && (!over || (!q.cfg.strict && q.ring.is_empty())) {
            f.held += 1;
            if !f.counted {
                f.counted = true;
                q.active_flows += 1;
                q.total_weight = tw;
            }
            if over {
                q.borrowed += 1;
            }
            add(&self.active, 1);
            return FlowTry::Go(self.permit_of(flow));
        }
        q.sweep();
        if over && q.cfg.reject_over {
            q.flow_rejected += 1;
            return FlowTry::Over;
        }
        FlowTry::Wait
    }

    /// Queues `waiter` in `flow`'s FIFO. If the flow may have a free slot it
    /// is admitted before this returns (inside this call, on this thread).
    pub fn enqueue_flow(self: &Arc<Self>, flow: u64, waiter: W) -> Ticket<W> {
        let Some(fair) = &self.fair else {
            return self.enqueue(waiter);
        };
        let entry = Arc::new(Entry {
            state: std::sync::atomic::AtomicU8::new(WAITING),
            payload: Mutex::new(Some(waiter)),
        });
        let slot_free = {
            let mut q = fair.lock();
            let q = &mut *q;
            let spare = if q.flows.get(&flow).is_none_or(|f| f.queue.capacity() == 0) {
                q.spare.pop()
            } else {
                None
            };
            let f = q.active_flow(flow);
            if let Some(spare) = spare {
                f.queue = spare;
            }
            f.queue.push_back(entry.clone());
            f.live += 1;
            if !f.in_ring {
                f.in_ring = true;
                f.credit = f.w.weight;
                q.ring.push_back(flow);
            }
            add(&self.waiting, 1);
            // Under the lock: a release that frees a slot after this sees
            // the waiter counted and dispatches itself.
            self.active.load(Ordering::SeqCst) < self.limit.load(Ordering::SeqCst)
        };
        if slot_free {
            self.dispatch();
        }
        Ticket {
            entry,
            slots: self.clone(),
            flow,
        }
    }

    /// Counters of a fair limiter (zero otherwise).
    pub fn fair_stats(&self) -> FairStats {
        self.fair.as_ref().map_or_else(FairStats::default, |f| {
            let q = f.lock();
            FairStats {
                flows: q.active_flows,
                borrowed: q.borrowed,
                flow_rejected: q.flow_rejected,
            }
        })
    }

    /// `flow`'s slots held, waiters and share now; `None` if it holds and
    /// waits for nothing (or the limiter is not fair).
    pub fn flow_state(&self, flow: u64) -> Option<FlowState> {
        let q = self.fair.as_ref()?.lock();
        let f = q.flows.get(&flow).filter(|f| f.counted)?;
        Some(FlowState {
            held: f.held,
            waiting: f.live,
            share: q.share(f.w, self.limit(), q.total_weight),
        })
    }

    /// [`Slots::fair_release`], out of the FIFO's release path.
    #[cold]
    #[inline(never)]
    pub(crate) fn fair_release_cold(self: &Arc<Self>, flow: u64) {
        self.fair_release(flow);
    }

    /// Frees `flow`'s slot and, unless this thread is already handing slots
    /// out here, gives it to the next waiter, picked under the same lock.
    pub(crate) fn fair_release(self: &Arc<Self>, flow: u64) {
        let Some(fair) = &self.fair else { return };
        let first = {
            let mut q = fair.lock();
            let q = &mut *q;
            if let Some(f) = q.flows.get_mut(&flow) {
                f.held = f.held.saturating_sub(1);
                if f.counted && f.held == 0 && f.live == 0 {
                    f.counted = false;
                    q.active_flows -= 1;
                    q.total_weight -= u64::from(f.w.weight);
                }
            }
            q.sweep();
            debug_assert!(
                self.active.load(Ordering::Relaxed) > 0,
                "slot released twice"
            );
            add(&self.active, -1);
            // Nested in a hand-off (an `admit` gave its slot back): the
            // running loop hands the slot on.
            if self.waiting.load(Ordering::SeqCst) == 0 || self.dispatching_here() {
                return;
            }
            self.grant(q)
        };
        self.dispatch_with(first);
    }

    /// Picks the next waiter under `q`'s lock and counts its slot.
    fn grant(&self, q: &mut FairQueue<W>) -> Option<(u64, W)> {
        let limit = self.limit.load(Ordering::SeqCst);
        let active = self.active.load(Ordering::SeqCst);
        let g = q.pick(limit, active);
        if g.is_some() {
            add(&self.active, 1);
            add(&self.waiting, -1);
        }
        g
    }

    /// A waiter of `flow` was taken out by a cancel: fix the counts.
    #[inline(never)]
    pub(crate) fn fair_cancelled(&self, flow: u64) {
        let Some(fair) = &self.fair else { return };
        let mut q = fair.lock();
        add(&self.waiting, -1);
        let mut idle_queue = false;
        if let Some(f) = q.flows.get_mut(&flow) {
            f.live = f.live.saturating_sub(1);
            if f.live == 0 {
                f.queue.clear();
                idle_queue = f.in_ring;
                f.in_ring = false;
            } else {
                let dead = f.queue.len().saturating_sub(f.live as usize);
                if dead > 32 && dead * 2 > f.queue.len() {
                    f.queue
                        .retain(|e| e.state.load(Ordering::Acquire) == WAITING);
                }
            }
        }
        if idle_queue {
            q.ring.retain(|&k| k != flow);
        }
        q.settle(flow);
    }

    /// Admits waiters while [`FairQueue::pick`] finds one; returns the
    /// payload of the first `admit` that panicked.
    #[inline(never)]
    pub(crate) fn fair_dispatch_loop(
        self: &Arc<Self>,
        first: Option<(u64, W)>,
    ) -> Option<Box<dyn std::any::Any + Send>> {
        let fair = self.fair.as_ref()?;
        let mut panicked = None;
        let mut next = first;
        // Bounded: each round admits (takes out) one waiter.
        loop {
            let grant = match next.take() {
                Some(g) => Some(g),
                None if self.waiting.load(Ordering::SeqCst) > 0 => self.grant(&mut fair.lock()),
                None => None,
            };
            let Some((flow, w)) = grant else { break };
            let permit = self.permit_of(flow);
            // A declined permit is dropped: its release sees this dispatch
            // running (nested) and only frees the slot; the loop hands it on.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.admit(permit))) {
                Ok(Ok(())) => {}
                Ok(Err(permit)) => drop(permit),
                Err(payload) => {
                    panicked.get_or_insert(payload);
                }
            }
        }
        panicked
    }

    pub(crate) fn fair_remove_waiting(&self, mut gone: impl FnMut(&W) -> bool) -> Vec<W> {
        let Some(fair) = &self.fair else {
            return Vec::new();
        };
        let snapshot: Vec<(u64, Arc<Entry<W>>)> = {
            let q = fair.lock();
            q.ring
                .iter()
                .flat_map(|k| q.flows[k].queue.iter().map(move |e| (*k, e.clone())))
                .collect()
        };
        let mut removed = Vec::new();
        for (flow, e) in snapshot {
            let is_gone = e.payload.lock().as_ref().is_some_and(&mut gone);
            if is_gone {
                if let Some(w) = e.take() {
                    self.fair_cancelled(flow);
                    removed.push(w);
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests;
