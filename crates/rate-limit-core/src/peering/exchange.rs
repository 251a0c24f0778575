//! DThrottle's peer exchange for keyed rate limits (`--peers`), without
//! Traffic Server: the members (peered limiters, each under its `--group`
//! name), the socket (crates/peer's `Transport`) and what one tick does.
//! The plugin runs [`Exchange::tick`] on a periodic task and publishes the
//! [`Tick`]'s counts as its metrics.
//!
//! If the port is in use (by another process, or an older copy of the
//! plugin replaced by a reload) the limiters limit locally and the bind is
//! tried again from the tick, backing off from 1 s to 30 s, for as long as
//! it takes (`peer::rebind`): an old transaction may keep the old copy's
//! rules for hours.

use std::io::ErrorKind;
use std::path::Path;
use std::sync::{OnceLock, Weak};
use std::time::{Duration, Instant};

use limits::{Clock, Waiter};
use parking_lot::Mutex;

use super::PeerOptions;
use crate::Limiter;

/// Most datagrams applied per tick (the queue holds [`INBOUND`]).
const MAX_PER_TICK: usize = 1024;
const INBOUND: usize = 4096;
const OUTBOUND: usize = 64;
/// Largest clock difference between peers; a quiet sender's replay state
/// is kept twice as long (crates/peer/src/receiver.rs).
const REPLAY_WINDOW_MS: u64 = 10_000;

/// A peered limiter as the exchange sees it: the type is erased so that one
/// exchange serves limiters of any waiter type.
pub trait Member: Send + Sync {
    fn id(&self) -> u64;
    /// Adds a peer's hits on `tag`; false if the limiter took none.
    fn apply(&self, tag: &[u8], hits: u32) -> bool;
    /// This instance's hits since the last report (and how many tags the
    /// bound left out).
    fn report(&self, max_tags: usize) -> dthrottle::Report;
    /// Blocks started here since the last report, each with its
    /// milliseconds left, and how many the bound dropped (`--block`).
    fn blocks(&self) -> (Vec<peer::Entry>, u64);
    /// A peer's block of `tag` for `ms` more milliseconds; false if the
    /// limiter took none.
    fn apply_block(&self, tag: &[u8], ms: u32) -> bool;
}

impl<W: Waiter, C: Clock> Member for Limiter<W, C>
where
    Limiter<W, C>: Send + Sync,
{
    fn id(&self) -> u64 {
        Limiter::id(self)
    }

    fn apply(&self, tag: &[u8], hits: u32) -> bool {
        self.apply_peer(tag, hits)
    }

    fn report(&self, max_tags: usize) -> dthrottle::Report {
        self.peer_report(max_tags)
    }

    fn blocks(&self) -> (Vec<peer::Entry>, u64) {
        self.peer_blocks()
    }

    fn apply_block(&self, tag: &[u8], ms: u32) -> bool {
        self.apply_peer_block(tag, ms)
    }
}

/// The socket and its members. Dropping it stops the transport's thread
/// (joined: drop it off a request's thread).
pub struct Exchange {
    /// The socket's settings, as `(option, value)`, for agreement checks.
    socket: Vec<(&'static str, String)>,
    transport: OnceLock<peer::Transport>,
    /// The port was in use: the settings to bind with, and when to try again.
    rebind: Mutex<Option<Rebind>>,
    members: Mutex<Vec<Entry>>,
    /// The transport's counters as last reported in a [`Tick`].
    published: Mutex<peer::Stats>,
}

struct Rebind {
    config: peer::Config,
    schedule: peer::rebind::Schedule,
}

struct Entry {
    group: Box<[u8]>,
    id: u64,
    member: Weak<dyn Member>,
    period: Duration,
    max_tags: usize,
    next: Instant,
}

/// A member, alive (for one tick).
type Live = std::sync::Arc<dyn Member>;

/// What one tick did, for the metrics: counts since the last tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// Datagrams of a group some member has.
    pub received: u64,
    /// Peer hits the members took.
    pub applied: u64,
    /// Peer blocks the members took (`--block`).
    pub blocks_applied: u64,
    /// Tags left out of reports by `--peer-max-tags` (blocks too).
    pub tags_dropped: u64,
    pub reports_sent: u64,
    /// Refused datagrams: unauthenticated, replayed, malformed or from a
    /// sender not allowed.
    pub rejected: u64,
    pub inbound_dropped: u64,
    pub outbound_dropped: u64,
    pub send_errors: u64,
    pub senders_dropped: u64,
    /// The socket is bound (false while limiting locally).
    pub bound: bool,
}

/// The metric (`plugin.rate_limiter.peer_bound`) of the sockets bound:
/// every copy of the plugin adds to it.
pub const BOUND: &str = "peer_bound";

impl Tick {
    /// The counts, by their process-wide metric's name
    /// (`plugin.rate_limiter.NAME`: one socket serves every peered rule, and
    /// a rejected datagram belongs to none).
    pub fn counts(&self) -> [(&'static str, u64); 10] {
        [
            ("peer_reports_sent", self.reports_sent),
            ("peer_reports_received", self.received),
            ("peer_hits_applied", self.applied),
            ("peer_blocks_applied", self.blocks_applied),
            ("peer_rejected", self.rejected),
            ("peer_tags_dropped", self.tags_dropped),
            ("peer_inbound_dropped", self.inbound_dropped),
            ("peer_outbound_dropped", self.outbound_dropped),
            ("peer_send_errors", self.send_errors),
            ("peer_senders_dropped", self.senders_dropped),
        ]
    }
}

impl Exchange {
    /// Binds the socket for `p`, whose `--peer-secret-file` is `secret`
    /// (resolved by the caller). A port in use is tried again from
    /// [`tick`](Self::tick); any other socket error is logged and the
    /// exchange limits locally. Only an unreadable secret is an error.
    pub fn start(p: &PeerOptions, secret: &Path, now: Instant) -> Result<Exchange, String> {
        let key = peer::Key::from_file(secret).map_err(|e| format!("--peer-secret-file: {e}"))?;
        // Only the unicast peers and --peer-allow may send; a multicast group
        // without --peer-allow takes any sender (the MAC applies anyway).
        let config = peer::Config {
            listen: p.listen,
            peers: p.peers.clone(),
            group: p.group,
            multicast_interface: p.interface,
            multicast_ttl: 1,
            key,
            policy: peer::Policy {
                allowed: p.allowed_senders(),
                window_ms: REPLAY_WINDOW_MS,
                max_senders: p.max_senders,
            },
            inbound_capacity: INBOUND,
            outbound_capacity: OUTBOUND,
        };
        let e = Exchange {
            socket: p.socket_options(),
            transport: OnceLock::new(),
            rebind: Mutex::new(None),
            members: Mutex::new(Vec::new()),
            published: Mutex::default(),
        };
        match peer::Transport::start(config.clone()) {
            Ok(t) => e.started(t),
            Err(err) if err.kind() == ErrorKind::AddrInUse => {
                log::warn!(
                    "peer exchange not started, limiting locally: {err} (by another process, or \
                     an older copy of this plugin replaced by a reload?); trying again after {} \
                     s, then backing off to every {} s until it binds",
                    peer::rebind::FIRST_DELAY.as_secs(),
                    peer::rebind::MAX_DELAY.as_secs()
                );
                *e.rebind.lock() = Some(Rebind {
                    config,
                    schedule: peer::rebind::Schedule::new(now),
                });
            }
            Err(err) => log::error!("peer exchange disabled, limiting locally: {err}"),
        }
        Ok(e)
    }

    /// Fails, naming the option, if `p`'s socket settings differ from the
    /// running socket's: one socket serves every rule of the process.
    pub fn agrees(&self, p: &PeerOptions) -> Result<(), String> {
        let mine = p.socket_options();
        match mine
            .iter()
            .zip(&self.socket)
            .find(|((_, a), (_, b))| a != b)
        {
            None => Ok(()),
            Some(((name, mine), (_, theirs))) => Err(format!(
                "--{name}={mine} differs from --{name}={theirs} of the running peer exchange: \
                 one socket serves every rule of the process; to change it, reload without \
                 peered rules first, or restart traffic_server"
            )),
        }
    }

    /// Adds a limiter that exchanges under `group` every `p.period_ms` (once:
    /// a reload that keeps it joins again). Members gone are forgotten here.
    pub fn join(&self, p: &PeerOptions, group: &str, member: Weak<dyn Member>, now: Instant) {
        let Some(id) = member.upgrade().map(|m| m.id()) else {
            return;
        };
        let mut members = self.members.lock();
        members.retain(|m| m.member.strong_count() > 0);
        if !members.iter().any(|m| m.id == id) {
            let period = Duration::from_millis(p.period_ms);
            members.push(Entry {
                group: group.as_bytes().into(),
                id,
                member,
                period,
                max_tags: p.max_tags,
                next: now + period,
            });
        }
    }

    /// The bound address, once bound.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.transport.get().map(peer::Transport::local_addr)
    }

    /// Binds again if due, applies what arrived, sends the reports due and
    /// counts it all. Called from one thread at a time.
    pub fn tick(&self, now: Instant) -> Tick {
        if self.transport.get().is_none() {
            self.rebind(now);
        }
        let mut tick = Tick::default();
        if let Some(t) = self.transport.get() {
            self.receive(t, &mut tick);
        }
        let mut due = Vec::new();
        for m in self.members.lock().iter_mut() {
            if now >= m.next {
                m.next = (m.next + m.period).max(now);
                due.push((m.group.clone(), m.member.clone(), m.max_tags));
            }
        }
        for (group, member, max_tags) in due {
            let Some(m) = member.upgrade() else { continue };
            let report = m.report(max_tags);
            let (blocks, dropped) = m.blocks();
            tick.tags_dropped = tick
                .tags_dropped
                .saturating_add(report.dropped_tags)
                .saturating_add(dropped);
            let Some(t) = self.transport.get() else {
                continue;
            };
            if !report.entries.is_empty() {
                t.send(peer::Outgoing {
                    group: group.clone(),
                    kind: peer::Kind::Hits,
                    entries: report.entries,
                });
            }
            if !blocks.is_empty() {
                t.send(peer::Outgoing {
                    group,
                    kind: peer::Kind::Blocks,
                    entries: blocks,
                });
            }
        }
        if let Some(t) = self.transport.get() {
            let s = t.stats();
            let mut last = self.published.lock();
            let d = |now: u64, last: u64| now.saturating_sub(last);
            tick.reports_sent = d(s.reports_sent, last.reports_sent);
            tick.rejected = d(s.rejected() + s.bad(), last.rejected() + last.bad());
            tick.inbound_dropped = d(s.inbound_dropped, last.inbound_dropped);
            tick.outbound_dropped = d(s.outbound_dropped, last.outbound_dropped);
            tick.send_errors = d(s.send_errors, last.send_errors);
            tick.senders_dropped = d(s.senders_dropped, last.senders_dropped);
            tick.bound = true;
            *last = s;
        }
        tick
    }

    fn receive(&self, t: &peer::Transport, tick: &mut Tick) {
        let members: Vec<(Box<[u8]>, Live)> = self
            .members
            .lock()
            .iter()
            .filter_map(|m| m.member.upgrade().map(|l| (m.group.clone(), l)))
            .collect();
        for _ in 0..MAX_PER_TICK {
            let Some(dg) = t.recv() else { break };
            let mut ours = false;
            for (_, m) in members.iter().filter(|(g, _)| *g == dg.group) {
                ours = true;
                for (tag, v) in &dg.entries {
                    match dg.kind {
                        peer::Kind::Hits if m.apply(tag, *v) => tick.applied += u64::from(*v),
                        peer::Kind::Blocks if m.apply_block(tag, *v) => tick.blocks_applied += 1,
                        _ => {}
                    }
                }
            }
            tick.received += u64::from(ours);
        }
    }

    fn started(&self, t: peer::Transport) {
        log::info!(
            "peer exchange on {} (sender id {:016x})",
            t.local_addr(),
            t.id()
        );
        let _ = self.transport.set(t);
    }

    /// The port was in use: try again if due.
    fn rebind(&self, now: Instant) {
        let mut r = self.rebind.lock();
        let Some(rb) = r.as_mut() else { return };
        if !rb.schedule.due(now) {
            return;
        }
        match peer::Transport::start(rb.config.clone()) {
            Ok(t) => {
                self.started(t);
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
}

#[cfg(test)]
mod tests;
