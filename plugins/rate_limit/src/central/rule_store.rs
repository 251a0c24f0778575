//! A rule's store (`--store`): the client it shares with every rule naming
//! the same store URL and `--store-timeout` (one I/O thread and connection,
//! found or started in `STORES`), what goes to it and comes back (`Token`),
//! the store's metrics, a transaction's lease, and a response's charge
//! (`--count-status`). The decision's path is `central.rs`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ats::poller::{Drain, Poller};
use ats::stats::Stat;
use rate_limit_core::peering::exchange::Member;
use rate_limit_core::store::StoreOptions;
use rate_limit_core::{metric_name, Options};
use store::redis::{Decide, LeaseIds, Op, Redis, Reply};
use store::{Answer, Client, Clients, Completion, Config};

use super::sync;
use crate::metrics::bump;

/// How often the drainer looks for completions while any are outstanding.
const DRAIN_EVERY: Duration = Duration::from_millis(1);
/// Most completions handled per drainer run.
const DRAIN_MAX: usize = 4096;
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
    poller: Poller,
    ids: LeaseIds,
}

/// A rule's share of the store (`--store`): its client and metrics.
pub(crate) struct RuleStore {
    pub(super) store: Arc<Store>,
    pub(super) opts: StoreOptions,
    pub(super) metrics: StoreMetrics,
    /// `--store-sync`: the exchange runs while a rule holds it.
    _sync: Option<Arc<sync::Syncer>>,
}

/// What a completion resumes. Safety: the client's I/O thread drops what
/// is still queued when it exits, so a token that carries a parked
/// transaction must keep the client alive (an `Asked`'s rule holds its
/// store; a `Sync` holds its syncer, which holds its store): the client
/// then never exits with such a token queued.
pub(crate) enum Token {
    /// A decision: a parked transaction's (central.rs), or a dry run's,
    /// counted and logged when it comes back (dry.rs).
    Asked(Box<dyn Asked>),
    Release(StoreMetrics),
    /// `--count-status`: a response's charge (nothing waits for it).
    Charge(StoreMetrics),
    /// `--store-sync --block`: a block stored for the other proxies.
    Block(StoreMetrics),
    /// `--store-sync`: a key's exchange (its tag and the hits sent).
    Sync(Arc<sync::Syncer>, Box<[u8]>, u32),
}

/// A decision in flight: what its completion resumes or logs. An
/// implementor that carries a parked transaction must keep the store's
/// client alive (see [`Token`]): both hold the rule, whose `store` holds it.
pub(crate) trait Asked: Send {
    /// The store answered or timed out (on the drainer's thread).
    fn completed(self: Box<Self>, waited: Duration, answer: Answer<Reply>);
    /// It could not be queued (on the asking thread).
    fn failed(self: Box<Self>);
}

/// What a `--store` rule keeps on a transaction.
pub(crate) enum TxnCentral {
    /// Named in DoRemap, to be asked at POST_REMAP.
    Pending(String),
    /// Admitted with a concurrency lease, given back when dropped.
    Lease { _held: Lease },
    /// `--count-status`, admitted by the store: the keys its response
    /// charges ([`RuleStore::charge`]), and its lease if any.
    Charged { base: String, _held: Option<Lease> },
}

impl TxnCentral {
    /// The keys to ask about, if the decision is still to be asked.
    pub(crate) fn take_pending(slot: &mut Option<Box<TxnCentral>>) -> Option<String> {
        match slot.take().map(|b| *b) {
            Some(TxnCentral::Pending(base)) => Some(base),
            other => {
                *slot = other.map(Box::new);
                None
            }
        }
    }
}

pub(crate) struct Lease {
    store: Arc<Store>,
    base: String,
    member: String,
    metrics: StoreMetrics,
}

impl Drop for Lease {
    /// At TXN_CLOSE (an ATS thread): the `ZREM` goes to the I/O thread. If
    /// it cannot (the queue is full), the lease expires after `--lease-ttl`.
    fn drop(&mut self) {
        let op = Op::Release {
            base: std::mem::take(&mut self.base),
            member: std::mem::take(&mut self.member),
        };
        let s = &self.store;
        match s.client.submit(op, Token::Release(self.metrics), s.timeout) {
            Ok(()) => Poller::arm(s),
            Err(_) => bump(self.metrics.errors, 1),
        }
    }
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
        limiter_id: u64,
        limiter: Weak<dyn Member>,
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
            Some(ms) => Some(sync::join(
                &store,
                limiter_id,
                limiter,
                &s.namespace,
                ms,
                metrics,
            )?),
            None => None,
        };
        Ok(Some(RuleStore {
            store,
            opts: s.clone(),
            metrics,
            _sync: sync,
        }))
    }

    /// The decision to ask of Redis for `base` under `o`, and its lease member.
    pub(crate) fn decide(&self, o: &Options, base: String) -> (Op, String) {
        let member = self.store.ids.next();
        let op = Op::Decide(Decide {
            base,
            interval_us: o.rate.map_or(0, |r| (1e6 / r).round().max(1.0) as u64),
            burst: o.burst,
            limit: o.limit.unwrap_or(0),
            member: member.clone(),
            lease_ttl_ms: self.opts.lease_ttl_s * 1000,
            check_only: o.count_status.is_some(),
            block_us: o.block_nanos().map_or(0, |n| n / 1000),
        });
        (op, member)
    }

    /// Submits a decision; false (counted, and `asked` told) if it could
    /// not be queued.
    pub(crate) fn ask(&self, op: Op, asked: Box<dyn Asked>) -> bool {
        let store = &self.store;
        store.start_waker();
        match store.client.submit(op, Token::Asked(asked), store.timeout) {
            Ok(()) => {
                Poller::arm(store);
                true
            }
            Err((Token::Asked(a), _)) => {
                bump(self.metrics.errors, 1);
                a.failed();
                false
            }
            Err(_) => false,
        }
    }

    /// The lease Redis granted `member` at `base`, given back when dropped.
    pub(crate) fn lease(&self, base: String, member: String) -> Lease {
        Lease {
            store: self.store.clone(),
            base,
            member,
            metrics: self.metrics,
        }
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

impl Store {
    /// On a net thread (POST_REMAP), once: the I/O thread wakes this
    /// thread through a socket ATS polls (`ats::wake`) whenever it has
    /// handed back completions, so a decision resumes its transaction within
    /// microseconds. The timer drainer stays as the fallback.
    pub(super) fn start_waker(self: &Arc<Self>) {
        Poller::open_wake(self, |notify| {
            self.client.set_notify(notify);
        });
    }
}

impl Drain for Store {
    fn poller(&self) -> &Poller {
        &self.poller
    }

    /// On a net thread: handles what completed (at most [`DRAIN_MAX`]).
    fn drain(&self) {
        self.client.drain(DRAIN_MAX, completed);
    }

    fn outstanding(&self) -> bool {
        self.client.outstanding() > 0
    }
}

fn completed(c: Completion<Reply, Token>) {
    match c.token {
        Token::Release(m) | Token::Charge(m) | Token::Block(m) => match c.answer {
            Answer::Reply(_) => {}
            Answer::Error(_) => bump(m.errors, 1),
            Answer::Timeout => bump(m.timeouts, 1),
        },
        Token::Asked(a) => a.completed(c.submitted.elapsed(), c.answer),
        Token::Sync(s, tag, hits) => s.completed(tag, hits, c.answer),
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
