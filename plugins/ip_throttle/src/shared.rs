//! Shared per-IP state (`--store=memcached://…` or `redis://…`): proxies
//! of one `--instance` run each request's state-machine step on one record
//! per IP in the store, so a ban earned on one is enforced on all, and
//! their violations add up (Perlbal's `memcached_servers`). (About 430
//! lines: one step's path, asked, drained and acted on, reads best whole.)
//!
//! One transaction whose IP the state machine decides:
//! 1. DoRemap leaves the request's [`ToStep`] on the transaction and hooks
//!    POST_REMAP (lists, bans seen here and the scope were decided there).
//! 2. POST_REMAP parks the transaction and hands the step to the store's
//!    I/O thread ([`ask`]), which reads the record, runs the step on it
//!    (`shared::request`, pure) and compare-and-swaps it back (memcached
//!    `cas`, or a Redis script comparing the value), again after a lost
//!    race.
//! 3. The I/O thread wakes a net thread through the store's wake channel
//!    (a timer on the net pool is the fallback; `ats::poller`), which takes
//!    the results: this proxy's state adopts the step, its events
//!    and metrics are reported, and the transaction is resumed, delayed or
//!    refused on its own thread. If the store failed or did not answer by
//!    `--store-timeout`, the step runs on local state instead, and the
//!    error is logged at most once per [`LOG_EVERY`].
//!
//! One client (one I/O thread and connection per server) serves every rule
//! naming the same servers and timeout. The rules (and transactions in
//! flight) hold it; when the last is gone (a reload dropped or changed its
//! `--store`), its thread exits and its connections close.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ats::poller::{Drain, Poller};
use ats::{error_page, Parked};
use ip_throttle_core::shared::{self, Update, Write};
use ip_throttle_core::{Action, Decision, Delayed, IpState, Machine, Options, Params, ToStep};
use store::memcached::Memcached;
use store::redis_cas::RedisCas;
use store::rmw::{CasBackend, Modify, Put, Rmw};
use store::url::StoreUrl;
use store::{Answer, Client, Clients, Completion, Config, SubmitError};

use crate::delay::{self, Delay};
use crate::rule::Rule;

/// How often the poller looks for results while any are outstanding.
const POLL_EVERY: Duration = Duration::from_millis(1);
/// Most results handled per poll.
const DRAIN_MAX: usize = 4096;
/// Store errors are logged at most this often (per store).
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// The live stores; weak, so a store lives as long as a rule or a
/// transaction uses it.
static STORES: Clients<Store> = Clients::new();

/// What the I/O thread does with an IP's record.
pub(crate) enum Step {
    /// A request's state-machine step; `write: false` with `--log-only`
    /// (a dry run reads the shared record but changes nothing in it).
    Request {
        local: IpState,
        now: shared::Now,
        params: Params,
        write: bool,
    },
    /// The `unban` command: forget the record.
    Unban,
}

impl Modify for Step {
    type Out = Option<Update>;

    fn apply(&self, current: Option<&[u8]>) -> (Option<Update>, Put) {
        let Step::Request {
            local,
            now,
            params,
            write,
        } = self
        else {
            return (None, Put::Delete);
        };
        let u = shared::request(current, *local, *now, params);
        let put = match &u.write {
            _ if !write => Put::Keep,
            Write::Keep => Put::Keep,
            Write::Set { value, ttl_secs } => Put::Set {
                value: value.clone().into_bytes(),
                ttl_secs: u32::try_from(*ttl_secs).unwrap_or(u32::MAX),
            },
            Write::Delete => Put::Delete,
        };
        (Some(u), put)
    }
}

/// What a result goes back to. Safety: the client's I/O thread drops what
/// is still queued when it exits, so a token that carries a parked
/// transaction must keep the client alive (`Asked`'s rule holds its
/// store): the client then never exits with such a token queued.
pub(crate) enum Token {
    /// A parked transaction waiting for its step, and its place among the
    /// IP's delayed requests (`Throttler::reserve`).
    Asked {
        rule: Arc<Rule>,
        parked: Parked,
        step: ToStep,
        reserved: Option<Delayed>,
    },
    Unban(Arc<Rule>),
}

/// The client of either kind of store.
enum Backing {
    Memcached(Client<CasBackend<Memcached, Step>, Token>),
    Redis(Client<CasBackend<RedisCas, Step>, Token>),
}

impl Backing {
    fn submit(
        &self,
        op: Rmw<Step>,
        t: Token,
        timeout: Duration,
    ) -> Result<(), (Token, SubmitError)> {
        match self {
            Backing::Memcached(c) => c.submit(op, t, timeout),
            Backing::Redis(c) => c.submit(op, t, timeout),
        }
    }

    fn drain(&self, max: usize, f: impl FnMut(Completion<Option<Update>, Token>)) {
        match self {
            Backing::Memcached(c) => c.drain(max, f),
            Backing::Redis(c) => c.drain(max, f),
        }
    }

    fn outstanding(&self) -> usize {
        match self {
            Backing::Memcached(c) => c.outstanding(),
            Backing::Redis(c) => c.outstanding(),
        }
    }

    fn set_notify(&self, f: Box<dyn Fn() + Send + Sync>) {
        match self {
            Backing::Memcached(c) => c.set_notify(f),
            Backing::Redis(c) => c.set_notify(f),
        };
    }
}

/// A store's client and its poller.
pub(crate) struct Store {
    url: StoreUrl,
    timeout: Duration,
    client: Backing,
    poller: Poller,
    /// When the last error was logged (ms since `epoch`; 0: never).
    logged_ms: AtomicU64,
    epoch: Instant,
}

impl Store {
    /// The store a rule's options name (shared with every rule naming the
    /// same servers and timeout), started with the first; `None` without
    /// `--store`.
    pub(crate) fn for_rule(o: &Options) -> Result<Option<Arc<Store>>, String> {
        let Some(url) = &o.store else {
            return Ok(None);
        };
        let timeout = Duration::from_millis(o.store_timeout_ms);
        let matches = |s: &Store| &s.url == url && s.timeout == timeout;
        STORES
            .get_or_start(matches, || {
                let started = match url {
                    StoreUrl::Memcached(servers) => Client::start(
                        "ipt-store",
                        CasBackend::new(Memcached::new(servers.clone())),
                        Config::default(),
                    )
                    .map(Backing::Memcached),
                    StoreUrl::Redis(addr) => {
                        let backend = RedisCas::new(addr)
                            .map_err(|e| format!("--store={}: {e}", url.url()))?;
                        Client::start("ipt-store", CasBackend::new(backend), Config::default())
                            .map(Backing::Redis)
                    }
                };
                let client = started.map_err(|e| {
                    format!("--store={}: cannot start its I/O thread: {e}", url.url())
                })?;
                Ok(Arc::new(Store {
                    url: url.clone(),
                    timeout,
                    client,
                    poller: Poller::new(POLL_EVERY),
                    logged_ms: AtomicU64::new(0),
                    epoch: Instant::now(),
                }))
            })
            .map(Some)
    }

    /// Whether `o` names this store (a reload may not change it).
    pub(crate) fn same(this: &Option<Arc<Store>>, o: &Options) -> bool {
        let timeout = Duration::from_millis(o.store_timeout_ms);
        match (this, &o.store) {
            (None, None) => true,
            (Some(s), Some(url)) => &s.url == url && s.timeout == timeout,
            _ => false,
        }
    }

    /// Logs a store error unless one was logged within [`LOG_EVERY`].
    fn log_error(&self, what: &str) {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.logged_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < LOG_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .logged_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            log::warn!(
                "--store={}: {what}; deciding on this proxy's own state \
                 (logged at most every {} s)",
                self.url.url(),
                LOG_EVERY.as_secs()
            );
        }
    }
}

impl Drain for Store {
    fn poller(&self) -> &Poller {
        &self.poller
    }

    fn drain(&self) {
        self.client.drain(DRAIN_MAX, |c| self.completed(c));
    }

    fn outstanding(&self) -> bool {
        self.client.outstanding() > 0
    }
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// POST_REMAP: hands the parked transaction's step to the store.
pub(crate) fn ask(rule: Arc<Rule>, parked: Parked, step: ToStep) {
    let Some(store) = rule.store.clone() else {
        return decided(rule, parked, step, Machine::Local);
    };
    let (local, now, params, reserved) = rule.throttler.reserve(&step, wall_ms());
    let op = Rmw {
        key: rule.throttler.record_key(step.client),
        modify: Step::Request {
            local,
            now,
            params,
            write: !rule.throttler.snapshot().opts.log_only,
        },
    };
    let token = Token::Asked {
        rule,
        parked,
        step,
        reserved,
    };
    // On this net thread, once: the I/O thread wakes it when results are
    // back (microseconds); the timer stays as the fallback.
    Poller::open_wake(&store, |notify| store.client.set_notify(notify));
    match store.client.submit(op, token, store.timeout) {
        Ok(()) => Poller::arm(&store),
        Err((token, why)) => {
            store.log_error(&format!("cannot queue a request ({why:?})"));
            if let Token::Asked {
                rule,
                parked,
                step,
                reserved,
            } = token
            {
                rule.report.store_error();
                drop(reserved);
                decided(rule, parked, step, Machine::Local);
            }
        }
    }
}

/// The `unban` command (on a task thread): removes the IP's shared record,
/// so no proxy of the instance finds the ban again. Fire and forget: a
/// failure is counted and logged.
pub(crate) fn unban(rule: &Arc<Rule>, ip: ip_throttle_core::Client) {
    let Some(store) = rule.store.clone() else {
        return;
    };
    let op = Rmw {
        key: rule.throttler.record_key(ip),
        modify: Step::Unban,
    };
    match store
        .client
        .submit(op, Token::Unban(rule.clone()), store.timeout)
    {
        Ok(()) => Poller::arm(&store),
        Err((_, why)) => {
            rule.report.store_error();
            store.log_error(&format!("cannot queue an unban ({why:?})"));
        }
    }
}

impl Store {
    /// A result (on a net thread).
    fn completed(&self, c: Completion<Option<Update>, Token>) {
        let (rule, parked, step, reserved) = match c.token {
            Token::Asked {
                rule,
                parked,
                step,
                reserved,
            } => (rule, parked, step, reserved),
            Token::Unban(rule) => {
                match c.answer {
                    Answer::Reply(_) => {}
                    Answer::Error(e) => {
                        rule.report.store_error();
                        self.log_error(&format!("unban: {e}"));
                    }
                    Answer::Timeout => rule.report.store_timeout(),
                }
                return;
            }
        };
        let update = match c.answer {
            Answer::Reply(Some(u)) => {
                rule.report.store_decision();
                Some(u)
            }
            Answer::Reply(None) => None,
            Answer::Error(e) => {
                rule.report.store_error();
                self.log_error(&e);
                None
            }
            Answer::Timeout => {
                rule.report.store_timeout();
                self.log_error(&format!("no answer within {} ms", self.timeout.as_millis()));
                None
            }
        };
        match &update {
            Some(u) => decided(
                rule,
                parked,
                step,
                Machine::Shared {
                    update: u,
                    reserved,
                },
            ),
            None => {
                // The local step counts its own delay: give the place back.
                drop(reserved);
                decided(rule, parked, step, Machine::Local);
            }
        }
    }
}

/// Runs the step, reports it and acts on the parked transaction.
fn decided(rule: Arc<Rule>, parked: Parked, step: ToStep, how: Machine<'_>) {
    let ip = step.client;
    let d = rule.throttler.step(step, how);
    rule.report.decision(ip, &d);
    act(rule, parked, ip, d);
}

/// What [`Rule::apply`] does in remap, for a parked transaction.
fn act(rule: Arc<Rule>, parked: Parked, ip: ip_throttle_core::Client, d: Decision) {
    if let Some(until) = d.banned_until {
        delay::unban_at(&rule, d.key, ip, until);
    }
    match (d.action, d.delayed) {
        (Action::Delay(delay), Some(counted)) => delay::hold(
            parked,
            Delay {
                rule,
                delay,
                counted,
            },
        ),
        (Action::Pass | Action::Delay(_), counted) => parked.on_home(move |h| {
            // --log-only: a would-be-delayed request counts against
            // --max-concurrent until it completes (dropped at TXN_CLOSE).
            if let (Some(counted), Some(st)) = (counted, crate::rule::state(&h)) {
                *st.wait.lock() = Some(Delay {
                    rule,
                    delay: 0,
                    counted,
                });
            }
            h.resume()
        }),
        (Action::Forbid, _) => parked.on_home(|h| {
            h.txn().set_error_body(&error_page(403), "text/html");
            h.fail(403)
        }),
        (Action::TooMany, _) => parked.on_home(|h| {
            h.txn().set_error_body(&error_page(503), "text/html");
            crate::rule::too_many(h.txn());
            h.fail(503)
        }),
    }
}
