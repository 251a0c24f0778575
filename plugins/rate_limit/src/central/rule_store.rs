//! A rule's store (`--store`): the client it shares with every rule naming
//! the same store URL and `--store-timeout` (one I/O thread and connection,
//! found or started in `STORES`), the store's metrics, and a response's
//! charge (`--count-status`). The decision's path is `central.rs`.

use std::sync::Arc;
use std::time::Duration;

use ats::poller::Poller;
use ats::stats::Stat;
use rate_limit_core::store::StoreOptions;
use rate_limit_core::{metric_name, Options};
use store::redis::{LeaseIds, Op, Redis};
use store::{Client, Clients, Config};

use super::{sync, Token};
use crate::queue::Queued;
use crate::state::bump;

/// How often the drainer looks for completions while any are outstanding.
const DRAIN_EVERY: Duration = Duration::from_millis(1);
/// Upper bounds of the `store_latency.le_*` buckets, in ms (then `le_inf`).
const LATENCY_MS: [u64; 7] = [1, 2, 5, 10, 20, 50, 100];

/// The live stores, by URL and timeout. Weak: a store lives as long as a
/// rule or a transaction uses it.
static STORES: Clients<Store> = Clients::new();

/// A store's client and its drainer.
pub(crate) struct Store {
    pub(super) url: String,
    pub(super) timeout: Duration,
    pub(super) client: Client<Redis, Token>,
    /// Brings completions back: the wake channel, a timer as the fallback.
    pub(super) poller: Poller,
    pub(super) ids: LeaseIds,
}

/// A rule's share of the store (`--store`): its client and metrics.
pub(crate) struct RuleStore {
    pub(super) store: Arc<Store>,
    pub(super) opts: StoreOptions,
    pub(super) metrics: StoreMetrics,
    /// `--store-sync`: the exchange runs while a rule holds it.
    _sync: Option<Arc<sync::Syncer>>,
}

#[derive(Clone, Copy)]
pub(crate) struct StoreMetrics {
    pub(super) decisions: Option<Stat>,
    pub(super) errors: Option<Stat>,
    pub(super) timeouts: Option<Stat>,
    /// Cumulative: `le_1ms` … `le_100ms`, `le_inf`.
    latency: [Option<Stat>; LATENCY_MS.len() + 1],
}

impl StoreMetrics {
    fn new(o: &Options) -> StoreMetrics {
        let make = |m: &str| match Stat::find_or_create(&metric_name(&o.prefix, &o.metric_tag, m)) {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("{e}");
                None
            }
        };
        let mut latency = [None; LATENCY_MS.len() + 1];
        for (i, ms) in LATENCY_MS.iter().enumerate() {
            latency[i] = make(&format!("store_latency.le_{ms}ms"));
        }
        latency[LATENCY_MS.len()] = make("store_latency.le_inf");
        StoreMetrics {
            decisions: make("store_decisions"),
            errors: make("store_errors"),
            timeouts: make("store_timeouts"),
            latency,
        }
    }

    pub(super) fn latency(&self, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        for (i, le) in LATENCY_MS.iter().enumerate() {
            if ms <= *le as f64 {
                bump(self.latency[i], 1);
            }
        }
        bump(self.latency[LATENCY_MS.len()], 1);
    }
}

impl RuleStore {
    /// The rule's store client (shared with every rule naming the same
    /// store and timeout), started with the first.
    pub(crate) fn new(
        o: &Options,
        limiter: &Arc<rate_limit_core::Limiter<Queued>>,
    ) -> Result<Option<RuleStore>, String> {
        let Some(s) = &o.store else { return Ok(None) };
        let url = s.url();
        let timeout = Duration::from_millis(s.timeout_ms);
        let matches = |x: &Store| x.url == url && x.timeout == timeout;
        let store = STORES.get_or_start(matches, || {
            let backend = Redis::new(&s.redis).map_err(|e| format!("--store={url}: {e}"))?;
            let client = Client::start("rl-store", backend, Config::default())
                .map_err(|e| format!("--store={url}: cannot start its I/O thread: {e}"))?;
            Ok::<_, String>(Arc::new(Store {
                url: url.clone(),
                timeout,
                client,
                poller: Poller::new(DRAIN_EVERY),
                ids: LeaseIds::default(),
            }))
        })?;
        let metrics = StoreMetrics::new(o);
        let sync = match s.sync_ms {
            Some(ms) => Some(sync::join(&store, limiter, &s.namespace, ms, metrics)?),
            None => None,
        };
        Ok(Some(RuleStore {
            store,
            opts: s.clone(),
            metrics,
            _sync: sync,
        }))
    }

    /// One decision in Redis per request (not `--store-sync`).
    pub(crate) fn exact(&self) -> bool {
        self.opts.sync_ms.is_none()
    }

    /// `--count-status`: charges the bucket at `base` in Redis. Fire and
    /// forget: the response does not wait; a charge that cannot be queued,
    /// fails or times out is counted in `store_errors`/`store_timeouts`
    /// and lost to Redis. False if it could not be queued (the caller
    /// charges this proxy's limiter instead).
    pub(crate) fn charge(&self, base: String, rate: f64, burst: u32) -> bool {
        let op = Op::Charge {
            base,
            interval_us: (1e6 / rate).round().max(1.0) as u64,
            burst,
        };
        let s = &self.store;
        match s.client.submit(op, Token::Charge(self.metrics), s.timeout) {
            Ok(()) => {
                Poller::arm(s);
                true
            }
            Err(_) => {
                bump(self.metrics.errors, 1);
                false
            }
        }
    }
}

/// The last rule of this copy is gone (`TSRemapDone`): says what
/// transactions in flight still hold (it stops when they finish).
pub(crate) fn done() {
    let (stores, syncing) = (STORES.live(), sync::running());
    if stores > 0 || syncing > 0 {
        log::debug!(
            "{stores} store client(s) and {syncing} --store-sync exchange(s) held by \
             transactions in flight; they stop when those finish"
        );
    }
}
