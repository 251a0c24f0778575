//! The sockets of every store client (Redis and memcached): one deadline
//! bounds a whole exchange, and neither name resolution nor connecting can
//! hold the I/O thread past it.
//!
//! - [`Timed`]: a TCP stream whose every read and write waits at most what
//!   is left of the exchange's deadline, and none starts past it, so a
//!   server that drips its answer (or reads our request) a byte at a time
//!   cannot stretch an exchange. A socket timeout set once per reply would
//!   not do: each of the many reads under it would wait that long again.
//! - [`Endpoint`]: a server's host and port. A host name is resolved on a
//!   thread of its own, never on the I/O thread (`getaddrinfo` cannot be
//!   bounded: a silent resolver holds it for its whole timeout and
//!   retries): at configuration, and again when a connect needs it at
//!   most once a second. Connects use the addresses last resolved; only
//!   the first, before any lookup has finished, waits for one, and no
//!   longer than its deadline.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::client::BatchError;

/// Time left until `deadline`, or a timeout.
pub(crate) fn left(deadline: Instant) -> Result<Duration, BatchError> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(BatchError::Timeout)
}

pub(crate) fn io_err(e: io::Error) -> BatchError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => BatchError::Timeout,
        _ => BatchError::Failed(e.to_string()),
    }
}

/// A TCP stream with one deadline for the whole exchange (set it before
/// each exchange).
pub(crate) struct Timed {
    stream: TcpStream,
    pub deadline: Instant,
}

impl Timed {
    pub fn new(stream: TcpStream) -> Timed {
        Timed {
            stream,
            deadline: Instant::now(),
        }
    }

    fn left(&self) -> io::Result<Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::ErrorKind::TimedOut.into())
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A new lookup of a name no sooner than this after the last one started
/// (lookups follow failed connects, which back off from 10 ms).
const RELOOKUP: Duration = Duration::from_secs(1);
/// Most addresses kept for a name.
const MAX_ADDRS: usize = 16;

/// A server's address: host (name or IP address) and port.
#[derive(Clone)]
pub(crate) struct Endpoint {
    host: String,
    port: u16,
    how: How,
}

#[derive(Clone)]
enum How {
    Ip(SocketAddr),
    Name(Arc<Lookup>),
    /// Not a `HOST:PORT` (a memcached server string): why.
    Invalid(String),
}

#[derive(Default)]
struct Lookup {
    state: Mutex<Looked>,
    done: Condvar,
}

#[derive(Default)]
struct Looked {
    /// The addresses of the last lookup that found any.
    addrs: Vec<SocketAddr>,
    /// Why the last lookup failed, if it did.
    error: Option<String>,
    running: bool,
    started: Option<Instant>,
}

impl Lookup {
    fn lock(&self) -> MutexGuard<'_, Looked> {
        // The lookup thread only stores results: a panic cannot leave
        // them half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Endpoint {
    /// `host` an IP address (IPv6 without brackets) or a name, whose
    /// lookup starts now.
    pub fn new(host: &str, port: u16) -> Endpoint {
        let how = match host.parse::<IpAddr>() {
            Ok(ip) => How::Ip(SocketAddr::new(ip, port)),
            Err(_) => How::Name(Arc::default()),
        };
        let e = Endpoint {
            host: host.to_owned(),
            port,
            how,
        };
        if let How::Name(l) = &e.how {
            e.start_lookup(&mut l.lock());
        }
        e
    }

    /// `HOST:PORT` or `[V6]:PORT`.
    pub fn parse(host_port: &str) -> Endpoint {
        let parsed = host_port.rsplit_once(':').and_then(|(h, p)| {
            let h = h
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(h);
            Some((h, p.parse::<u16>().ok()?))
        });
        match parsed {
            Some((h, p)) if !h.is_empty() => Endpoint::new(h, p),
            _ => Endpoint {
                host: host_port.to_owned(),
                port: 0,
                how: How::Invalid(format!("{host_port}: not HOST:PORT")),
            },
        }
    }

    pub fn is(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port == port
    }

    /// A thread resolves the name; at most one at a time per name, so a
    /// hung resolver holds one thread per name, whatever the reconnects.
    fn start_lookup(&self, s: &mut Looked) {
        let How::Name(lookup) = &self.how else {
            return;
        };
        let (l, host, port) = (lookup.clone(), self.host.clone(), self.port);
        s.running = true;
        s.started = Some(Instant::now());
        let spawned = thread::Builder::new()
            .name("store-resolve".into())
            .spawn(move || {
                let found = (host.as_str(), port).to_socket_addrs();
                let mut s = l.lock();
                match found {
                    Ok(a) => {
                        let a: Vec<SocketAddr> = a.take(MAX_ADDRS).collect();
                        if a.is_empty() {
                            s.error = Some("no address".into());
                        } else {
                            s.addrs = a;
                            s.error = None;
                        }
                    }
                    // The last addresses found stay: better than none.
                    Err(e) => s.error = Some(e.to_string()),
                }
                s.running = false;
                l.done.notify_all();
            });
        if let Err(e) = spawned {
            s.running = false;
            s.error = Some(format!("cannot start a lookup: {e}"));
        }
    }

    /// The addresses to try. A name's last lookup serves at once (a new
    /// one starts beside it if due); before any has found an address, the
    /// one running is waited for, by `deadline`.
    fn addrs(&self, deadline: Instant) -> Result<Vec<SocketAddr>, BatchError> {
        let lookup = match &self.how {
            How::Ip(a) => return Ok(vec![*a]),
            How::Invalid(why) => return Err(BatchError::Failed(why.clone())),
            How::Name(l) => l,
        };
        let mut s = lookup.lock();
        if !s.running && s.started.is_none_or(|t| t.elapsed() >= RELOOKUP) {
            self.start_lookup(&mut s);
        }
        while s.addrs.is_empty() && s.running {
            let wait = left(deadline)?;
            s = lookup
                .done
                .wait_timeout(s, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if s.addrs.is_empty() {
            let why = s.error.as_deref().unwrap_or("no address");
            return Err(BatchError::Failed(format!(
                "cannot resolve {}: {why}",
                self.host
            )));
        }
        Ok(s.addrs.clone())
    }

    /// Connects by `deadline`. Each address but the last may take only its
    /// share of the time left, so one whose connect hangs leaves time for
    /// the others.
    pub fn connect(&self, deadline: Instant) -> Result<TcpStream, BatchError> {
        let addrs = self.addrs(deadline)?;
        let n = addrs.len();
        let mut last = BatchError::Failed(format!("{}: no address", self.host));
        for (i, a) in addrs.iter().enumerate() {
            let share = left(deadline)? / (n - i) as u32;
            match TcpStream::connect_timeout(a, share.max(Duration::from_micros(1))) {
                Ok(s) => {
                    s.set_nodelay(true).map_err(io_err)?;
                    return Ok(s);
                }
                Err(e) => {
                    last = match io_err(e) {
                        BatchError::Failed(e) => BatchError::Failed(format!("{a}: {e}")),
                        t => t,
                    }
                }
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_need_no_lookup() {
        let e = Endpoint::new("::1", 7000);
        assert!(matches!(e.how, How::Ip(a) if a == "[::1]:7000".parse().unwrap()));
        let e = Endpoint::parse("[::1]:7000");
        assert!(matches!(e.how, How::Ip(a) if a == "[::1]:7000".parse().unwrap()));
        let e = Endpoint::parse("127.0.0.1:11211");
        assert!(matches!(e.how, How::Ip(a) if a == "127.0.0.1:11211".parse().unwrap()));
        for bad in ["nohost", ":1", "h:x", "h:65536"] {
            let e = Endpoint::parse(bad);
            assert!(
                matches!(
                    e.addrs(Instant::now() + Duration::from_secs(1)),
                    Err(BatchError::Failed(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_name_is_resolved_off_the_calling_thread_and_kept() {
        let e = Endpoint::new("localhost", 6379);
        let far = Instant::now() + Duration::from_secs(5);
        let a = e.addrs(far).expect("localhost resolves");
        assert!(
            a.iter().all(|a| a.ip().is_loopback() && a.port() == 6379),
            "{a:?}"
        );
        // Kept: the next connects need no lookup, even with no time left.
        let How::Name(l) = &e.how else { panic!() };
        let started = l.lock().started;
        assert_eq!(e.addrs(Instant::now()).ok(), Some(a));
        assert_eq!(l.lock().started, started, "no new lookup within RELOOKUP");
    }

    #[test]
    fn a_timed_stream_stops_at_its_deadline() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _peer = l.accept().unwrap();
        let mut t = Timed::new(s);
        t.deadline = Instant::now() + Duration::from_millis(30);
        let started = Instant::now();
        let e = t.read(&mut [0; 8]).unwrap_err();
        assert!(matches!(io_err(e), BatchError::Timeout));
        assert!(started.elapsed() < Duration::from_millis(500));
        // Past the deadline nothing starts.
        assert_eq!(
            t.read(&mut [0; 8]).unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(t.write(b"x").unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
