//! The fair mode of [`Slots`]: admission, queueing, release and hand-off
//! by flow, all under the limiter's fair lock; the scheduling decisions are
//! [`FairQueue`]'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::queue::{queue_part, share, FairQueue, Flow};
use super::{FairConfig, FairStats, FlowRefused, FlowState, FlowTry};
use crate::entry::{Entry, WAITING};
use crate::slots::{Slots, Ticket, Waiter, FAIR_BIT};

/// A fair limiter's `waiting` changes only under its lock: a plain load and
/// store, cheaper than a read-modify-write, cannot lose an update (`active`
/// is also decremented by the FIFO release path, outside the lock).
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
        if self.waiters() > 0 {
            self.dispatch();
        }
    }

    /// Live waiters (without [`FAIR_BIT`]).
    fn waiters(&self) -> u32 {
        self.waiting.load(Ordering::SeqCst) & !FAIR_BIT
    }

    /// Takes a slot for `flow` if it may have one now (see the module doc).
    /// On a limiter that is not fair, `flow` is ignored.
    pub fn try_acquire_flow(self: &Arc<Self>, flow: u64) -> FlowTry<W> {
        let Some(fair) = &self.fair else {
            return self.try_acquire().map_or(FlowTry::Wait, FlowTry::Go);
        };
        let mut q = fair.lock();
        let q = &mut *q;
        // Under the lock: `set_limit` takes it after storing a lower limit,
        // so this decision sees the new one or ends before it is in force.
        let limit = self.limit.load(Ordering::SeqCst);
        let active = self.active.load(Ordering::SeqCst);
        let w = q.weight_of(flow);
        // One lookup: a flow refused a slot now stays (idle) until a sweep.
        let f = q.flows.entry(flow).or_insert_with(|| Flow::new(w));
        let tw = q.total_weight + if f.counted { 0 } else { u64::from(f.w.weight) };
        let over = f.held > 0 && f.held >= share(f.w, q.cfg.flow_slots, limit, tw);
        let own_waiters = f.live > 0;
        // A flow with waiters never overtakes them. A free slot while others
        // wait is being handed on (a release decrements `active` before its
        // hand-off takes this lock): it is taken only if none of them may
        // have it (strict, all at their shares).
        let grant = active < limit
            && !own_waiters
            && if over {
                !q.cfg.strict && (q.ring.is_empty() || self.waiters() == 0)
            } else {
                // The ring may keep flows whose waiters all left (lazy removal).
                q.ring.is_empty() || self.waiters() == 0 || !q.entitled_waiter(limit)
            };
        if grant {
            let f = q.flows.get_mut(&flow).expect("made above");
            f.held += 1;
            if !f.counted {
                f.counted = true;
                q.active_flows += 1;
                q.total_weight = tw;
            }
            if over {
                q.borrowed += 1;
            }
            self.active.fetch_add(1, Ordering::SeqCst);
            return FlowTry::Go(self.permit_of(flow));
        }
        q.sweep();
        if over && q.cfg.reject_over {
            q.flow_rejected += 1;
            return FlowTry::Over;
        }
        FlowTry::Wait
    }

    /// Caps each flow's waiters at its part of `places` queue places:
    /// `ceil(places × weight / total weight of the active flows)`, at least
    /// 1 ([`Slots::try_enqueue_flow`] refuses beyond). `u32::MAX`: uncapped
    /// (the default).
    pub fn set_flow_queue(&self, places: u32) {
        if let Some(fair) = &self.fair {
            fair.lock().places = places;
        }
    }

    /// Queues `waiter` in `flow`'s FIFO without checking the flow's share
    /// or queue part (see [`Slots::try_enqueue_flow`]). If the flow may have
    /// a free slot it is admitted before this returns (inside this call).
    pub fn enqueue_flow(self: &Arc<Self>, flow: u64, waiter: W) -> Ticket<W> {
        match self.enqueue_flow_checked(flow, waiter, false) {
            Ok(t) => t,
            Err(FlowRefused::Over(w) | FlowRefused::Full(w)) => self.enqueue(w),
        }
    }

    /// Queues `waiter` in `flow`'s FIFO, or gives it back: its flow is at
    /// its share and over-users are refused ([`FairConfig::reject_over`];
    /// counted in `flow_rejected`), or the flow has its part of the queue
    /// places waiting ([`Slots::set_flow_queue`]). Decided under the lock
    /// that queues it, so a request that waited for something else first
    /// (a rate) is checked as it joins. Not fair: [`Slots::enqueue`].
    pub fn try_enqueue_flow(
        self: &Arc<Self>,
        flow: u64,
        waiter: W,
    ) -> Result<Ticket<W>, FlowRefused<W>> {
        self.enqueue_flow_checked(flow, waiter, true)
    }

    fn enqueue_flow_checked(
        self: &Arc<Self>,
        flow: u64,
        waiter: W,
        check: bool,
    ) -> Result<Ticket<W>, FlowRefused<W>> {
        let Some(fair) = &self.fair else {
            return Ok(self.enqueue(waiter));
        };
        let entry = Arc::new(Entry {
            state: std::sync::atomic::AtomicU8::new(WAITING),
            payload: Mutex::new(Some(waiter)),
        });
        let slot_free = {
            let mut q = fair.lock();
            let q = &mut *q;
            let w = q.weight_of(flow);
            let f = q.flows.entry(flow).or_insert_with(|| Flow::new(w));
            if check {
                let limit = self.limit.load(Ordering::SeqCst);
                let tw = q.total_weight + if f.counted { 0 } else { u64::from(f.w.weight) };
                // Refusals need a slot held or a waiter: the flow was there
                // before (nothing new to sweep).
                let over = f.held > 0
                    && q.cfg.reject_over
                    && f.held >= share(f.w, q.cfg.flow_slots, limit, tw);
                let full = f.live >= queue_part(q.places, f.w, tw);
                if over || full {
                    let w = entry.take().expect("never queued");
                    if over {
                        q.flow_rejected += 1;
                        return Err(FlowRefused::Over(w));
                    }
                    return Err(FlowRefused::Full(w));
                }
            }
            if !f.counted {
                f.counted = true;
                q.active_flows += 1;
                q.total_weight += u64::from(f.w.weight);
            }
            if f.queue.capacity() == 0 {
                if let Some(spare) = q.spare.pop() {
                    f.queue = spare;
                }
            }
            f.queue.push_back(entry.clone());
            f.live += 1;
            if !f.in_ring {
                f.in_ring = true;
                f.credit = f.w.weight;
                q.ring.push_back(flow);
            } else if f.live == 1 {
                // Left in the ring when its last waiter went: alive again.
                q.ring_dead -= 1;
            }
            add(&self.waiting, 1);
            // Under the lock: a release that frees a slot after this sees
            // the waiter counted and dispatches itself.
            self.active.load(Ordering::SeqCst) < self.limit.load(Ordering::SeqCst)
        };
        if slot_free {
            self.dispatch();
        }
        Ok(Ticket {
            entry,
            slots: self.clone(),
            flow,
        })
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
            // `active` was decremented by the caller (Slots::release).
            // Nested in a hand-off (an `admit` gave its slot back): the
            // running loop hands the slot on.
            if self.waiters() == 0 || self.dispatching_here() {
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
            self.active.fetch_add(1, Ordering::SeqCst);
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
        let mut died_in_ring = false;
        if let Some(f) = q.flows.get_mut(&flow) {
            f.live = f.live.saturating_sub(1);
            if f.live == 0 {
                f.queue.clear();
                // Stays in the ring (removed lazily): no scan per cancel.
                died_in_ring = f.in_ring;
            } else {
                let dead = f.queue.len().saturating_sub(f.live as usize);
                if dead > 32 && dead * 2 > f.queue.len() {
                    f.queue
                        .retain(|e| e.state.load(Ordering::Acquire) == WAITING);
                }
            }
        }
        if died_in_ring {
            q.died_in_ring();
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
                None if self.waiters() > 0 => self.grant(&mut fair.lock()),
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
