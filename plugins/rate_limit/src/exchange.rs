//! DThrottle's peer exchange for keyed rate limits (`--peers`, issue 13).
//!
//! One UDP socket and one background thread per process (crates/peer's
//! `Transport`), shared by every peered limiter: each exchanges under its
//! `--group` name. The thread only does socket I/O, HMAC and parsing; it
//! never calls the TS API. A periodic task on ATS's task pool ([`TICK`])
//! drains the peers' datagrams from its bounded queue and applies their hits
//! to the named limiters, sends each limiter's report when its
//! `--peer-period` is due, and updates the metrics (only ever from there).
//!
//! The socket's settings (`--peer-listen`, `--peers`/`--peer-group`,
//! `--peer-secret-file`, `--peer-allow`, `--peer-interface`,
//! `--peer-max-senders`) come from the first peered rule loaded; every later
//! rule must name the same ones (a different one fails the rule, naming the
//! option): changing them needs a reload without peered rules in between,
//! or a restart. If the socket cannot be opened,
//! the error is logged and the rules limit locally (the task still resets
//! their hit counts, so keys do not stay busy).
//!
//! The peered rules hold the exchange; the registry only refers to it. A
//! reload that keeps peered rules hands the running exchange to the new
//! ones (they are created before the old ones are deleted). When the last
//! peered rule is gone, the task stops and, on its thread (ET_TASK, never a
//! request's), drops the transport: its thread exits within a few ms and
//! the socket closes. A replaced .so is a second copy with its own
//! registry: its exchange finds the port still bound by the old copy's, so
//! it tries the bind again (limiting locally meanwhile), with a backoff
//! from 1 s to 30 s and for as long as it takes (`peer::rebind`): an old
//! transaction (a websocket, a long download) may keep the old copy's
//! rules for hours.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use ats::sched::{Periodic, Pool};
use ats::stats::Stat;
use parking_lot::Mutex;
use rate_limit_core::peering::PeerOptions;
use rate_limit_core::{Limiter, Options};
use store::Clients;

use crate::queue::Queued;
use crate::state::bump;

/// How often received reports are applied and due reports sent: adds at
/// most this to the exchange's delay d.
const TICK: Duration = Duration::from_millis(10);
/// Most datagrams applied per tick (the queue holds [`INBOUND`]).
const MAX_PER_TICK: usize = 1024;
const INBOUND: usize = 4096;
const OUTBOUND: usize = 64;
/// Largest clock difference between peers; a quiet sender's replay state
/// is kept twice as long (crates/peer/src/receiver.rs).
const REPLAY_WINDOW_MS: u64 = 10_000;

/// The process-wide metrics, `plugin.rate_limiter.<name>`: one socket serves
/// every peered rule, and a rejected datagram belongs to none.
const METRICS: [&str; 9] = [
    "peer_reports_sent",
    "peer_reports_received",
    "peer_hits_applied",
    "peer_rejected",
    "peer_tags_dropped",
    "peer_inbound_dropped",
    "peer_outbound_dropped",
    "peer_send_errors",
    "peer_senders_dropped",
];

/// The running exchange, if a peered rule holds it.
/// One at most: every peered rule's match (the socket settings must agree).
static EXCHANGE: Clients<Exchange> = Clients::new();

/// `peer_bound`: how many exchanges of the process hold their socket (0 or
/// 1; every copy of the plugin adds to the same metric).
const BOUND: &str = "peer_bound";

/// The peer exchange, held by every peered rule.
pub(crate) struct Exchange {
    /// The socket's settings, as `(option, value)`, for agreement checks.
    socket: Vec<(&'static str, String)>,
    /// Before `_task` (fields drop in order): the task's own reference is
    /// then the last, released on its ET_TASK thread, so the transport's
    /// thread is joined there, never on a request's thread.
    shared: Arc<Inner>,
    /// Stopped when the last peered rule is gone.
    _task: Periodic,
}

struct Inner {
    transport: OnceLock<peer::Transport>,
    /// The port was in use: the settings to bind with, and when to try again.
    rebind: Mutex<Option<Rebind>>,
    /// `peer_bound`: raised by the tick once `transport` is set, lowered
    /// when it is dropped.
    bound: Option<Stat>,
    members: Mutex<Vec<Member>>,
    metrics: [Option<Stat>; 9],
    /// Transport counters already published (`Published`).
    published: Mutex<Published>,
}

/// The transport's counters as last added to the metrics (it counts on its
/// own thread; only the tick, on an ATS thread, moves the metrics).
#[derive(Default)]
struct Published {
    reports_sent: u64,
    rejected: u64,
    inbound_dropped: u64,
    outbound_dropped: u64,
    send_errors: u64,
    senders_dropped: u64,
    /// Counted in `peer_bound`.
    bound: bool,
}

struct Rebind {
    config: peer::Config,
    schedule: peer::rebind::Schedule,
}

/// A member's group name and its limiter, alive.
type Live = Arc<Limiter<Queued>>;

struct Member {
    group: Box<[u8]>,
    id: u64,
    limiter: Weak<Limiter<Queued>>,
    period: Duration,
    max_tags: usize,
    next: Instant,
}

/// Adds a peered rule's limiter to the exchange, starting the exchange with
/// the first one. The rule keeps what this returns: the exchange runs as
/// long as a rule holds it.
pub(crate) fn join(
    opts: &Options,
    limiter: &Arc<Limiter<Queued>>,
) -> Result<Option<Arc<Exchange>>, String> {
    let (Some(p), Some(group)) = (&opts.peer, &opts.group) else {
        return Ok(None);
    };
    let socket = p.socket_options();
    let e = EXCHANGE.get_or_start(|_| true, || start(p, socket.clone()).map(Arc::new))?;
    if let Some(((name, mine), (_, theirs))) =
        socket.iter().zip(&e.socket).find(|((_, a), (_, b))| a != b)
    {
        return Err(format!(
            "--{name}={mine} differs from --{name}={theirs} of the running peer exchange: \
             one socket serves every rule of the process; to change it, reload without \
             peered rules first, or restart traffic_server"
        ));
    }
    let mut members = e.shared.members.lock();
    members.retain(|m| m.limiter.strong_count() > 0);
    if !members.iter().any(|m| m.id == limiter.id()) {
        let period = Duration::from_millis(p.period_ms);
        members.push(Member {
            group: group.as_bytes().into(),
            id: limiter.id(),
            limiter: Arc::downgrade(limiter),
            period,
            max_tags: p.max_tags,
            next: Instant::now() + period,
        });
    }
    drop(members);
    Ok(Some(e))
}

fn start(p: &PeerOptions, socket: Vec<(&'static str, String)>) -> Result<Exchange, String> {
    let path = PathBuf::from(&p.secret_file);
    let path = if path.is_absolute() {
        path
    } else {
        ats::config_dir().join(path)
    };
    let key = peer::Key::from_file(&path).map_err(|e| format!("--peer-secret-file: {e}"))?;
    // Only the unicast peers and --peer-allow may send; a multicast group
    // without --peer-allow takes any sender (the MAC applies anyway).
    let allowed = p.allowed_senders();
    let config = peer::Config {
        listen: p.listen,
        peers: p.peers.clone(),
        group: p.group,
        multicast_interface: p.interface,
        multicast_ttl: 1,
        key,
        policy: peer::Policy {
            allowed,
            window_ms: REPLAY_WINDOW_MS,
            max_senders: p.max_senders,
        },
        inbound_capacity: INBOUND,
        outbound_capacity: OUTBOUND,
    };
    let bound = Stat::find_or_create(&format!(
        "{}.{BOUND}",
        rate_limit_core::options::DEFAULT_PREFIX
    ))
    .map_err(|e| log::error!("{e}"))
    .ok();
    let transport = OnceLock::new();
    let mut rebind = None;
    match peer::Transport::start(config.clone()) {
        Ok(t) => {
            started(&t);
            let _ = transport.set(t);
        }
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            log::warn!(
                "peer exchange not started, limiting locally: {e} (by another process, or an \
                 older copy of this plugin replaced by a reload?); trying again after {} s, \
                 then backing off to every {} s until it binds",
                peer::rebind::FIRST_DELAY.as_secs(),
                peer::rebind::MAX_DELAY.as_secs()
            );
            rebind = Some(Rebind {
                config,
                schedule: peer::rebind::Schedule::new(Instant::now()),
            });
        }
        Err(e) => log::error!("peer exchange disabled, limiting locally: {e}"),
    }
    let metrics = METRICS.map(|m| {
        Stat::find_or_create(&format!("{}.{m}", rate_limit_core::options::DEFAULT_PREFIX))
            .map_err(|e| log::error!("{e}"))
            .ok()
    });
    let shared = Arc::new(Inner {
        transport,
        rebind: Mutex::new(rebind),
        bound,
        members: Mutex::new(Vec::new()),
        metrics,
        published: Mutex::default(),
    });
    let s = shared.clone();
    let task = Periodic::start(TICK, Pool::Task, move || s.tick())?;
    Ok(Exchange {
        socket,
        shared,
        _task: task,
    })
}

fn started(t: &peer::Transport) {
    log::info!(
        "peer exchange on {} (sender id {:016x})",
        t.local_addr(),
        t.id()
    );
}

impl Drop for Inner {
    /// The socket closes with the transport, just after (on the task's
    /// thread: metrics move only on ATS threads).
    fn drop(&mut self) {
        if self.published.get_mut().bound {
            bump(self.bound, -1);
        }
    }
}

impl Inner {
    /// The port was in use: try again if due (on the task thread).
    fn rebind(&self) {
        let mut r = self.rebind.lock();
        let Some(rb) = r.as_mut() else { return };
        let now = Instant::now();
        if !rb.schedule.due(now) {
            return;
        }
        match peer::Transport::start(rb.config.clone()) {
            Ok(t) => {
                started(&t);
                let _ = self.transport.set(t);
                *r = None;
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                if let Some(for_) = rb.schedule.in_use(now) {
                    log::warn!(
                        "peer exchange still not started after {} s, limiting locally: {e}; \
                         trying again every {} s",
                        for_.as_secs(),
                        peer::rebind::MAX_DELAY.as_secs()
                    );
                }
            }
            Err(e) => {
                log::error!("peer exchange disabled, limiting locally: {e}");
                *r = None;
            }
        }
    }

    /// On an ATS task thread: apply what arrived, send what is due, publish
    /// the counters.
    fn tick(&self) {
        if self.transport.get().is_none() {
            self.rebind();
        }
        let [sent, received, applied, rejected, tags_dropped, in_dropped, out_dropped, send_errors, senders_dropped] =
            self.metrics;
        let members: Vec<(Box<[u8]>, Live)> = self
            .members
            .lock()
            .iter()
            .filter_map(|m| m.limiter.upgrade().map(|l| (m.group.clone(), l)))
            .collect();
        if let Some(t) = self.transport.get() {
            let (mut datagrams, mut hits) = (0i64, 0i64);
            for _ in 0..MAX_PER_TICK {
                let Some(dg) = t.recv() else { break };
                let mut ours = false;
                for (_, l) in members.iter().filter(|(g, _)| *g == dg.group) {
                    ours = true;
                    for (tag, h) in &dg.entries {
                        if l.apply_peer(tag, *h) {
                            hits += i64::from(*h);
                        }
                    }
                }
                datagrams += i64::from(ours);
            }
            bump(received, datagrams);
            bump(applied, hits);
        }
        let now = Instant::now();
        let mut due = Vec::new();
        for m in self.members.lock().iter_mut() {
            if now >= m.next {
                m.next = (m.next + m.period).max(now);
                due.push((m.group.clone(), m.limiter.clone(), m.max_tags));
            }
        }
        let mut dropped = 0i64;
        for (group, limiter, max_tags) in due {
            let Some(l) = limiter.upgrade() else { continue };
            let report = l.peer_report(max_tags);
            dropped =
                dropped.saturating_add(i64::try_from(report.dropped_tags).unwrap_or(i64::MAX));
            if let (Some(t), false) = (self.transport.get(), report.entries.is_empty()) {
                t.send(peer::Outgoing {
                    group,
                    entries: report.entries,
                });
            }
        }
        bump(tags_dropped, dropped);
        if let Some(t) = self.transport.get() {
            let s = t.stats();
            let mut last = self.published.lock();
            let publish = |stat, now: u64, last: &mut u64| {
                bump(stat, now.saturating_sub(*last) as i64);
                *last = now;
            };
            publish(sent, s.reports_sent, &mut last.reports_sent);
            publish(rejected, s.rejected() + s.bad(), &mut last.rejected);
            publish(in_dropped, s.inbound_dropped, &mut last.inbound_dropped);
            publish(out_dropped, s.outbound_dropped, &mut last.outbound_dropped);
            publish(send_errors, s.send_errors, &mut last.send_errors);
            publish(
                senders_dropped,
                s.senders_dropped,
                &mut last.senders_dropped,
            );
            if !last.bound {
                last.bound = true;
                bump(self.bound, 1);
            }
        }
    }
}
