//! What a request gets, and the values that carry it between the steps of
//! a decision (scope, a shared store's answer, the state machine).

use std::sync::Arc;

use keyed::KeyTable;
use limits::Nanos;

use crate::options::{EventKind, LogEvents, Options};
use crate::shared;
use crate::state::{IpState, Phase};
use crate::Client;

/// The parts of a request the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub client: Client,
    pub method: &'a [u8],
    /// The path with its leading `/`, without the query.
    pub path: &'a [u8],
}

/// What the plugin does with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Pass,
    /// Hold it this long (a timer), then pass it if the client is still there.
    Delay(Nanos),
    /// 403 Forbidden (banned or deny-listed).
    Forbid,
    /// 503 Too many connections.
    TooMany,
}

/// Something that happened, for `ip_throttle.log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The IP's state after the event.
    pub phase: Phase,
    pub delay: Nanos,
    pub violations: u32,
}

/// The decision for one request.
#[derive(Debug)]
pub struct Decision {
    /// What to do (always `Pass` with `--log-only`).
    pub action: Action,
    /// What would be done without `--log-only` (= `action` otherwise).
    pub would: Action,
    /// At most two events: an expired ban's `unban`, then the request's own.
    pub events: [Option<Event>; 2],
    /// Held while the request counts as delayed (against `max_concurrent`):
    /// drop it when the delay ends or the request goes away. With
    /// `--log-only` a would-be-delayed request counts until it completes.
    pub delayed: Option<Delayed>,
    /// This request banned the IP until then (to log the `unban` on time).
    pub banned_until: Option<Nanos>,
    /// The IP's key in the state table.
    pub key: u64,
    /// The state table was full of busy IPs: the request passed untracked.
    pub untracked: bool,
    /// The rule's `--log-events` and `--log-only` when it was decided.
    pub log_events: LogEvents,
    pub log_only: bool,
}

impl Decision {
    pub(super) fn new(key: u64, would: Action, o: &Options) -> Decision {
        let log_only = o.log_only;
        Decision {
            log_events: o.log_events,
            log_only,
            action: if log_only { Action::Pass } else { would },
            would,
            events: [None, None],
            delayed: None,
            banned_until: None,
            key,
            untracked: false,
        }
    }

    pub(super) fn push(&mut self, e: Event) {
        if let Some(slot) = self.events.iter_mut().find(|s| s.is_none()) {
            *slot = Some(e);
        }
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().flatten()
    }
}

/// A request counted as delayed; dropping it stops counting it.
pub struct Delayed {
    pub(super) table: Arc<KeyTable<IpState>>,
    pub(super) key: u64,
}

impl std::fmt::Debug for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Delayed({:#x})", self.key)
    }
}

impl Drop for Delayed {
    fn drop(&mut self) {
        // A delayed IP is busy, so never evicted: the state is there.
        self.table.get(self.key, IpState::undelay);
    }
}

/// What [`Throttler::scope`] found.
#[derive(Debug)]
pub enum Scope {
    /// Decided without the state machine (listed, out of scope, banned).
    Decided(Decision),
    /// The IP's state machine decides.
    Machine(ToStep),
}

/// A request left to the state machine.
#[derive(Clone, Copy, Debug)]
pub struct ToStep {
    pub key: u64,
    /// The client, its address canonical (the shared record's key).
    pub client: Client,
    pub(super) deny_listed: bool,
}

/// Where the state machine runs.
#[derive(Debug)]
pub enum Machine<'a> {
    /// On this proxy's state.
    Local,
    /// On the shared record; adopt its outcome. `reserved`: the place
    /// [`Throttler::reserve`] took when the request was sent.
    Shared {
        update: &'a shared::Update,
        reserved: Option<Delayed>,
    },
}

pub(super) fn event(kind: EventKind, s: &IpState) -> Event {
    Event {
        kind,
        phase: s.phase(),
        delay: s.delay(),
        violations: s.violations(),
    }
}
