//! DThrottle's peer exchange for keyed rate limits (`--peers`, issue 13) on
//! Traffic Server: one exchange per process (`rate_limit_core::peering::
//! exchange`: its socket, members and tick), shared by every peered rule,
//! each under its `--group` name. A periodic task on ATS's task pool
//! ([`TICK`]) runs its tick and moves the metrics (only ever from there):
//! `plugin.rate_limiter.peer_*`, process-wide ([`Tick::counts`]).
//!
//! The socket's settings come from the first peered rule loaded; every
//! later rule must name the same ones (a different one fails the rule,
//! naming the option): changing them needs a reload without peered rules
//! in between, or a restart. A socket that cannot be opened is logged and
//! the rules limit locally.
//!
//! The peered rules hold the exchange; the registry only refers to it. A
//! reload that keeps peered rules hands the running exchange to the new
//! ones (they are created before the old ones are deleted). When the last
//! peered rule is gone, the task stops and, on its thread (ET_TASK, never a
//! request's), drops the transport: its thread exits within a few ms and
//! the socket closes. A replaced .so is a second copy with its own
//! registry: its exchange finds the port still bound by the old copy's, and
//! binds once it is free.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ats::sched::{Periodic, Pool};
use ats::stats::Stat;
use rate_limit_core::peering::exchange::{self, Member, Tick};
use rate_limit_core::Options;
use store::Clients;

use crate::metrics::bump;

/// How often received reports are applied and due reports sent: adds at
/// most this to the exchange's delay d.
const TICK: Duration = Duration::from_millis(10);

/// The running exchange, if a peered rule holds it.
static EXCHANGE: Clients<Exchange> = Clients::new();

/// The peer exchange, held by every peered rule.
pub(crate) struct Exchange {
    /// Before `_task` (fields drop in order): the task's own reference is
    /// then the last, released on its ET_TASK thread, so the transport's
    /// thread is joined there, never on a request's thread.
    shared: Arc<Shared>,
    /// Stopped when the last peered rule is gone.
    _task: Periodic,
}

struct Shared {
    exchange: exchange::Exchange,
    /// [`Tick::counts`]' metrics, in order.
    metrics: [Option<Stat>; 10],
    /// `peer_bound`, and whether this exchange is counted in it.
    bound_metric: Option<Stat>,
    bound: AtomicBool,
}

/// Adds a peered rule's limiter to the exchange, starting the exchange with
/// the first one. The rule keeps what this returns: the exchange runs as
/// long as a rule holds it.
pub(crate) fn join(
    opts: &Options,
    limiter: Weak<dyn Member>,
) -> Result<Option<Arc<Exchange>>, String> {
    let (Some(p), Some(group)) = (&opts.peer, &opts.group) else {
        return Ok(None);
    };
    let e = EXCHANGE.get_or_start(|_| true, || start(p).map(Arc::new))?;
    e.shared.exchange.agrees(p)?;
    e.shared.exchange.join(p, group, limiter, Instant::now());
    Ok(Some(e))
}

fn start(p: &rate_limit_core::peering::PeerOptions) -> Result<Exchange, String> {
    // Relative to ATS's configuration directory (`join` keeps an absolute path).
    let secret = ats::config_dir().join(&p.secret_file);
    let exchange = exchange::Exchange::start(p, &secret, Instant::now())?;
    let stat = |m: &str| {
        Stat::find_or_create(&format!("{}.{m}", rate_limit_core::options::DEFAULT_PREFIX))
            .map_err(|e| log::error!("{e}"))
            .ok()
    };
    let shared = Arc::new(Shared {
        exchange,
        metrics: Tick::default().counts().map(|(name, _)| stat(name)),
        bound_metric: stat(exchange::BOUND),
        bound: AtomicBool::new(false),
    });
    let s = shared.clone();
    let task = Periodic::start(TICK, Pool::Task, move || s.tick())?;
    Ok(Exchange {
        shared,
        _task: task,
    })
}

impl Shared {
    /// On an ATS task thread: the exchange's tick, then its counts.
    fn tick(&self) {
        let t = self.exchange.tick(Instant::now());
        for (stat, (_, n)) in self.metrics.iter().zip(t.counts()) {
            if let (Some(s), true) = (stat, n > 0) {
                s.add(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        if t.bound && !self.bound.swap(true, Ordering::Relaxed) {
            bump(self.bound_metric, 1);
        }
    }
}

impl Drop for Shared {
    /// The socket closes with the exchange, just after (on the task's
    /// thread: metrics move only on ATS threads).
    fn drop(&mut self) {
        if *self.bound.get_mut() {
            bump(self.bound_metric, -1);
        }
    }
}
