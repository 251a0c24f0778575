//! `max:auto`: the rule's max learned from the origin's latency by an
//! `adaptive::Controller` (crates/adaptive: the algorithm and why).
//!
//! - **Sampling.** A transaction that held one of the rule's places tells
//!   the controller how long the origin took, at TXN_CLOSE, while its place
//!   is still held. The rule's [`Sampler`] hook is added at remap, before
//!   the transaction's state (whose drop gives the place back) adds its own
//!   TXN_CLOSE hook: a transaction's hooks run in the order they were added.
//! - **The load it met** decides whether it measured the origin's no-load
//!   latency (at most the controller's `min` in flight): the places held
//!   when it entered and when it closes, and whether another request
//!   entered into a crowd (more than `min` in flight) in between, which
//!   the ends alone would miss: the rule counts such entries, and the
//!   transaction compares the count at its entry and at its close.
//! - **Reloads.** A rule's controller is found again by the rule that
//!   replaces it (same id, from-URL and bounds) while the old one lives:
//!   a reload of remap.config keeps what was learned, instead of probing
//!   the origin again (the max drops to its minimum for a few windows).
//! - **Gauges.** `limit`, `rtt_baseline_us`, `rtt_recent_us`, every second.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use adaptive::{Bounds, Controller, Outcome, State};
use ats::stats::{shared_gauges, Gauge, SharedGauges};
use ats::{CloseHandler, CloseHook, Txn};

use crate::{Rule, GLOBALS};

/// How often the learned max reaches its gauges.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The rules' controllers, weakly: a rule built by a reload takes over
/// its predecessor's (rule creation only, never a request).
type Controllers = Vec<((String, String, Bounds), Weak<Controller>)>;
static CONTROLLERS: Mutex<Controllers> = Mutex::new(Vec::new());

/// The controller of the rule `id` for `from`: the live one of a rule
/// with the same id, from-URL and bounds (a reload: what was learned goes
/// on, a pin does not, as no live change outlasts a reload), or a new one.
pub(crate) fn controller(id: &str, from: &str, bounds: Bounds) -> Option<Arc<Controller>> {
    let config = bounds.config()?;
    let key = (id.to_owned(), from.to_owned(), bounds);
    let found = {
        let mut all = CONTROLLERS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|(_, c)| c.strong_count() > 0);
        let found = all
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, c)| c.upgrade());
        if found.is_none() {
            let c = Arc::new(Controller::new(config, limits::MonotonicClock));
            all.push((key, Arc::downgrade(&c)));
            return Some(c);
        }
        found
    };
    let c = found?;
    let max = c.pin(None);
    log::info!("rule {from} id={id}: max:auto goes on from the previous rule's max {max}");
    Some(c)
}

/// What a `max:auto` rule holds besides its controller (in the [`Rule`]).
pub(crate) struct Learning {
    pub(crate) sampler: CloseHook<Sampler>,
    _gauges: Arc<SharedGauges>,
}

impl Learning {
    pub(crate) fn start(rule: &Arc<Rule>, c: &Arc<Controller>) -> Result<Learning, String> {
        let gauges = (0..State::GAUGES.len())
            .map(|i| -> Gauge<Controller> {
                (
                    format!("plugin.throttle.{}.{}", rule.id, State::GAUGES[i]),
                    Box::new(move |c| Some(c.state().gauges()[i])),
                )
            })
            .collect();
        Ok(Learning {
            sampler: CloseHook::new(Sampler { rule: rule.clone() })?,
            _gauges: shared_gauges(c, gauges, PUBLISH_EVERY),
        })
    }
}

/// What a transaction of a `max:auto` rule keeps of its entry.
#[derive(Default)]
pub(crate) struct Entry {
    /// The places held once it entered.
    with: AtomicU32,
    /// The rule's count of entries into a crowd, its own included.
    crowded: AtomicU64,
}

/// A transaction of `rule` took a place: notes the load it was sent into.
/// Two relaxed loads and stores, and an add for an entry into a crowd.
pub(crate) fn entered(rule: &Rule, entry: &Entry) {
    let Some(c) = &rule.auto else { return };
    let n = u32::try_from(rule.gate.in_flight()).unwrap_or(u32::MAX);
    let crowded = if n > c.config().min {
        rule.crowded.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        rule.crowded.load(Ordering::Relaxed)
    };
    entry.with.store(n, Ordering::Relaxed);
    entry.crowded.store(crowded, Ordering::Relaxed);
}

/// The most in flight a transaction is known to have met before its
/// close: its entry's count, or more than `min` if another entered into a
/// crowd since.
fn met(rule: &Rule, entry: &Entry, min: u32) -> u32 {
    let with = entry.with.load(Ordering::Relaxed);
    if rule.crowded.load(Ordering::Relaxed) != entry.crowded.load(Ordering::Relaxed) {
        return with.max(min.saturating_add(1));
    }
    with
}

/// The TXN_CLOSE hook of a `max:auto` rule's transactions.
pub(crate) struct Sampler {
    rule: Arc<Rule>,
}

impl CloseHandler for Sampler {
    fn closed(&self, txn: Txn<'_>) {
        let (Some(g), Some(c)) = (GLOBALS.get(), &self.rule.auto) else {
            return;
        };
        // Only a transaction that holds a place of this rule (not one
        // served fresh from cache, refused, or throttled by another rule).
        let Some(state) = g
            .state
            .get(txn)
            .filter(|s| Arc::ptr_eq(s.ticket.gate(), &self.rule) && s.ticket.holds())
        else {
            return;
        };
        // A busy controller measures a share, chosen before any read. A
        // 5xx or no answer is a failure, never an RTT; a request that never
        // reached the origin teaches nothing.
        if !c.wants_sample() {
            return;
        }
        let Some(reply) = txn.origin_reply() else {
            return;
        };
        let Some(outcome) = Outcome::of(reply.response()) else {
            return;
        };
        let met = met(&self.rule, &state.entry, c.config().min);
        c.observe(outcome, met, &self.rule.gate);
    }
}
