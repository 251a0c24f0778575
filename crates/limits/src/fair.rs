//! Fair shares of a limiter's slots between flows (OMERO's per-session,
//! per-user and per-group throttling strategies).
//!
//! A fair [`Slots`](crate::Slots) keeps one FIFO per flow (a client key) instead of one
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
//! Flows that hold or wait for a slot are at most `limit` plus the waiters,
//! which the caller bounds (queue places); idle flows are kept (a flow that
//! comes and goes then costs a lookup) until they outnumber the active ones
//! by 64 (`IDLE_KEPT`), then swept: at most 2 × active + 64 flows. Decisions run under
//! one lock per limiter (a release frees its slot in `active` first, then
//! takes the lock to hand it on); scans are bounded by the flows at their
//! share, which hold a slot each (at most `limit`).
//!
//! The scheduling (flows, the ring, shares) is `fair/queue.rs`, which knows
//! only the queue entries; the fair mode of [`Slots`](crate::Slots)
//! (admission, queueing, release and hand-off by flow) is `fair/hand_off.rs`.

use crate::slots::{Permit, Waiter};

mod hand_off;
pub(crate) mod queue;

pub use queue::{FairConfig, FlowWeight};

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

/// The outcome of [`Slots::try_acquire_flow`](crate::Slots::try_acquire_flow).
pub enum FlowTry<W: Waiter> {
    /// A slot, held by the flow.
    Go(Permit<W>),
    /// No slot for the flow now: queue it ([`Slots::enqueue_flow`](crate::Slots::enqueue_flow)).
    Wait,
    /// The flow is at its share and the limiter refuses over-users.
    Over,
}

/// Why [`Slots::try_enqueue_flow`](crate::Slots::try_enqueue_flow) gave a waiter back.
pub enum FlowRefused<W> {
    /// The flow is at its share and the limiter refuses over-users
    /// (counted in [`FairStats::flow_rejected`]).
    Over(W),
    /// The flow already has its part of the queue places waiting
    /// ([`Slots::set_flow_queue`](crate::Slots::set_flow_queue)).
    Full(W),
}

impl<W: Waiter> FlowTry<W> {
    pub fn permit(self) -> Option<Permit<W>> {
        match self {
            FlowTry::Go(p) => Some(p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
