//! The UDP transport: one socket and one background thread per process.
//!
//! The thread only does socket I/O, HMAC and parsing; it never calls the TS
//! API. Callers hand it reports to send ([`Transport::send`]) and take the
//! peers' authenticated datagrams ([`Transport::recv`]) through two bounded
//! lock-free queues, so a Traffic Server plugin can drain them from a
//! periodic task on an ATS thread. When a queue is full the newest item is
//! dropped and counted: peers' hits are advisory, never worth blocking for.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;
use socket2::{Domain, Protocol, Socket, Type};

use crate::auth::Key;
use crate::receiver::{Policy, Receiver};
use crate::wire::{self, Datagram, Entry, Kind, Reject};

/// How often the thread looks at its outbound queue and stop flag when no
/// datagram arrives: a report waits at most this long to leave.
const POLL: Duration = Duration::from_millis(5);

/// Where to send and listen, and how to authenticate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address the socket binds (port peers send to). For multicast, usually
    /// `0.0.0.0:PORT`.
    pub listen: SocketAddr,
    /// Unicast peers each report is sent to.
    pub peers: Vec<SocketAddr>,
    /// A multicast group (IPv4) joined and sent to, as well as the peers.
    pub group: Option<SocketAddr>,
    /// Interface for the multicast group (`0.0.0.0`: the kernel's choice).
    pub multicast_interface: Ipv4Addr,
    /// Hops multicast datagrams may travel.
    pub multicast_ttl: u32,
    pub key: Key,
    pub policy: Policy,
    /// Authenticated datagrams queued for the caller.
    pub inbound_capacity: usize,
    /// Reports queued for sending.
    pub outbound_capacity: usize,
}

/// One report for one group (a limiter, or a rate_limit rule or group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub group: Box<[u8]>,
    pub kind: Kind,
    pub entries: Vec<Entry>,
}

/// Counters since start; read from any thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub reports_sent: u64,
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    pub send_errors: u64,
    /// Reports not sent because the outbound queue was full.
    pub outbound_dropped: u64,
    pub datagrams_received: u64,
    /// Authenticated datagrams not queued because the inbound queue was full.
    pub inbound_dropped: u64,
    pub truncated: u64,
    pub oversized: u64,
    pub garbage: u64,
    pub wrong_version: u64,
    pub unknown_sender: u64,
    /// Authentic datagrams of new senders refused because the sender table
    /// was full (`max_senders`, each heard within twice the replay window).
    pub senders_dropped: u64,
    pub bad_mac: u64,
    pub replay: u64,
    pub stale: u64,
    pub malformed: u64,
}

impl Stats {
    /// Datagrams refused as forged or replayed or from unknown senders, or
    /// over the sender table (the plugin's `peer_rejected`).
    pub fn rejected(&self) -> u64 {
        self.unknown_sender + self.senders_dropped + self.bad_mac + self.replay + self.stale
    }

    /// Datagrams dropped as malformed in any way.
    pub fn bad(&self) -> u64 {
        self.truncated + self.oversized + self.garbage + self.wrong_version + self.malformed
    }
}

#[derive(Default)]
struct Counters {
    reports_sent: AtomicU64,
    datagrams_sent: AtomicU64,
    bytes_sent: AtomicU64,
    send_errors: AtomicU64,
    outbound_dropped: AtomicU64,
    datagrams_received: AtomicU64,
    inbound_dropped: AtomicU64,
    truncated: AtomicU64,
    oversized: AtomicU64,
    garbage: AtomicU64,
    wrong_version: AtomicU64,
    unknown_sender: AtomicU64,
    senders_dropped: AtomicU64,
    bad_mac: AtomicU64,
    replay: AtomicU64,
    stale: AtomicU64,
    malformed: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

struct Inner {
    inbound: ArrayQueue<Datagram>,
    outbound: ArrayQueue<Outgoing>,
    stop: AtomicBool,
    counters: Counters,
}

/// A running transport. Dropping it stops and joins the thread.
pub struct Transport {
    inner: Arc<Inner>,
    local: SocketAddr,
    id: u64,
    thread: Option<JoinHandle<()>>,
}

/// Milliseconds since the Unix epoch (the datagrams' sent-at clock).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Transport {
    /// Binds the socket, joins the group and starts the thread. Errors say
    /// which address failed; the caller then limits locally.
    pub fn start(config: Config) -> io::Result<Transport> {
        let socket = bind(&config)?;
        socket.set_read_timeout(Some(POLL))?;
        let local = socket.local_addr()?;
        let id = RandomState::new().hash_one((std::process::id(), unix_ms(), local));
        let inner = Arc::new(Inner {
            inbound: ArrayQueue::new(config.inbound_capacity.max(1)),
            outbound: ArrayQueue::new(config.outbound_capacity.max(1)),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let s = inner.clone();
        let thread = std::thread::Builder::new()
            .name("dthrottle-peer".into())
            .spawn(move || run(socket, config, id, &s))?;
        Ok(Transport {
            inner,
            local,
            id,
            thread: Some(thread),
        })
    }

    /// Queues a report for sending; false (and counted) if the queue is full.
    pub fn send(&self, report: Outgoing) -> bool {
        let ok = self.inner.outbound.push(report).is_ok();
        if !ok {
            bump(&self.inner.counters.outbound_dropped, 1);
        }
        ok
    }

    /// The next authenticated datagram from a peer, if any.
    pub fn recv(&self) -> Option<Datagram> {
        self.inner.inbound.pop()
    }

    /// The bound address (the port, when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// This process's sender id.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            reports_sent: l(&c.reports_sent),
            datagrams_sent: l(&c.datagrams_sent),
            bytes_sent: l(&c.bytes_sent),
            send_errors: l(&c.send_errors),
            outbound_dropped: l(&c.outbound_dropped),
            datagrams_received: l(&c.datagrams_received),
            inbound_dropped: l(&c.inbound_dropped),
            truncated: l(&c.truncated),
            oversized: l(&c.oversized),
            garbage: l(&c.garbage),
            wrong_version: l(&c.wrong_version),
            unknown_sender: l(&c.unknown_sender),
            senders_dropped: l(&c.senders_dropped),
            bad_mac: l(&c.bad_mac),
            replay: l(&c.replay),
            stale: l(&c.stale),
            malformed: l(&c.malformed),
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ctx(what: String) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The socket: a plain bind for unicast; for a multicast group, bound with
/// SO_REUSEADDR (every member on a host listens on the group's port), the
/// group joined on `multicast_interface`, which also sends.
fn bind(config: &Config) -> io::Result<UdpSocket> {
    let Some(group) = config.group else {
        return UdpSocket::bind(config.listen).map_err(ctx(format!("binding {}", config.listen)));
    };
    let g = match group.ip() {
        IpAddr::V4(g) if g.is_multicast() => g,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("peer group {group} is not an IPv4 multicast address (224.0.0.0/4)"),
            ))
        }
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&config.listen.into())
        .map_err(ctx(format!("binding {}", config.listen)))?;
    s.join_multicast_v4(&g, &config.multicast_interface)
        .map_err(ctx(format!(
            "joining multicast group {g} on {}",
            config.multicast_interface
        )))?;
    s.set_multicast_if_v4(&config.multicast_interface)?;
    s.set_multicast_ttl_v4(config.multicast_ttl)?;
    // Other members on this host (tests; a daemon beside a Traffic Server)
    // hear us too; our own copies are recognised by sender id.
    s.set_multicast_loop_v4(true)?;
    Ok(s.into())
}

fn run(socket: UdpSocket, config: Config, id: u64, inner: &Inner) {
    let mut receiver = Receiver::new(config.key.clone(), id, config.policy.clone());
    let dests: Vec<SocketAddr> = config.peers.iter().copied().chain(config.group).collect();
    let mut seq = 0u64;
    // Larger than MAX_DATAGRAM, so an oversized datagram is seen as such.
    let mut buf = vec![0u8; 2048];
    let c = &inner.counters;
    while !inner.stop.load(Ordering::Relaxed) {
        while let Some(report) = inner.outbound.pop() {
            let dgs = wire::encode_kind(
                &config.key,
                id,
                &mut seq,
                unix_ms(),
                &report.group,
                report.kind,
                &report.entries,
            );
            bump(&c.reports_sent, 1);
            for dg in &dgs {
                for dest in &dests {
                    match socket.send_to(dg, dest) {
                        Ok(n) => {
                            bump(&c.datagrams_sent, 1);
                            bump(&c.bytes_sent, n as u64);
                        }
                        Err(_) => bump(&c.send_errors, 1),
                    }
                }
            }
        }
        let (n, src) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            // Timeouts (WouldBlock/TimedOut), and ICMP errors of earlier
            // sends to a peer that is down (ConnectionRefused): keep going.
            Err(_) => continue,
        };
        bump(&c.datagrams_received, 1);
        match receiver.accept(src, &buf[..n], unix_ms()) {
            Ok(dg) => {
                if inner.inbound.push(dg).is_err() {
                    bump(&c.inbound_dropped, 1);
                }
            }
            Err(r) => bump(
                match r {
                    Reject::Truncated => &c.truncated,
                    Reject::Oversized => &c.oversized,
                    Reject::Garbage => &c.garbage,
                    Reject::WrongVersion => &c.wrong_version,
                    Reject::UnknownSender => &c.unknown_sender,
                    Reject::TooManySenders => &c.senders_dropped,
                    Reject::BadMac => &c.bad_mac,
                    Reject::Replay => &c.replay,
                    Reject::Stale => &c.stale,
                    Reject::Malformed => &c.malformed,
                    // Our own multicast, looped back: not an error.
                    Reject::Own => continue,
                },
                1,
            ),
        }
    }
}
