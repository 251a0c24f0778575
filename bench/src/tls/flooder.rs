//! The flooder: ~2,000 TLS connections a second from one address, cheap
//! on the client side so that on 2 cores it does not take the CPU ATS
//! needs and measure itself. It replays one recorded TLS 1.3 ClientHello
//! (made once by Python's ssl, SNI set) on paced non-blocking connections,
//! reads until the server's first record or its close, and resets the
//! connection (SO_LINGER 0: no TIME_WAIT, so 20,000 connections a run do
//! not exhaust the source address's ports). No key exchange on the client
//! side: the server still does its whole share (key share, signature) for
//! every ClientHello it answers.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use socket2::{Domain, Socket, Type};

use crate::sys;

/// The flooder's plan.
#[derive(Clone, Debug)]
pub struct Flood {
    pub port: u16,
    pub source: Ipv4Addr,
    pub per_second: f64,
    pub duration: Duration,
    pub hello: Vec<u8>,
}

/// What the server did with the flooder's connections.
#[derive(Clone, Debug, Default)]
pub struct FloodResult {
    pub opened: u64,
    /// The server's first record was a handshake record (its ServerHello).
    pub answered: u64,
    /// Refused: an alert record (any record but a handshake one) ...
    pub alerts: u64,
    /// ... or closed or reset before any record.
    pub closed: u64,
    /// No answer within [`ANSWER_TIMEOUT`].
    pub timeouts: u64,
    /// connect() failed or timed out (a full accept queue), or the write did.
    pub connect_errors: u64,
    /// Due while [`MAX_PENDING`] were open: not opened.
    pub skipped: u64,
    /// From the first connection to the last one opened, plus one gap.
    pub seconds: f64,
    /// CPU the bench process used meanwhile (the flooder; the light
    /// client is another process).
    pub cpu_s: f64,
}

impl FloodResult {
    pub fn rate(&self) -> f64 {
        self.opened as f64 / self.seconds.max(1e-9)
    }
}

const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// Open connections at most (each a file descriptor).
const MAX_PENDING: usize = 2000;

fn open(f: &Flood) -> std::io::Result<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_linger(Some(Duration::ZERO))?;
    s.bind(&SocketAddr::from((f.source, 0)).into())?;
    s.connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, f.port)).into(),
        CONNECT_TIMEOUT,
    )?;
    let mut t: TcpStream = s.into();
    t.set_nodelay(true)?;
    // A few hundred bytes into an empty socket buffer: never blocks.
    t.write_all(&f.hello)?;
    t.set_nonblocking(true)?;
    Ok(t)
}

/// Open connections, by epoll token (their index), with when each was opened.
#[derive(Default)]
struct Pending {
    slots: Vec<Option<(TcpStream, Instant)>>,
    free: Vec<usize>,
    len: usize,
}

impl Pending {
    fn insert(&mut self, conn: (TcpStream, Instant)) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(conn);
                i
            }
            None => {
                self.slots.push(Some(conn));
                self.slots.len() - 1
            }
        }
    }

    /// Dropping the stream resets the connection (SO_LINGER 0).
    fn remove(&mut self, i: usize) -> Option<(TcpStream, Instant)> {
        let c = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(c)
    }
}

/// Runs the flood; bounded by its duration plus [`ANSWER_TIMEOUT`] and a second.
/// Waits in epoll (O(ready) per wake-up, not O(open connections): an
/// overloaded server leaves a thousand connections waiting).
pub fn flood(f: &Flood) -> Result<FloodResult, String> {
    let mut r = FloodResult::default();
    let total = (f.per_second * f.duration.as_secs_f64()).round() as u64;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| format!("epoll: {e}"))?;
    let mut events = vec![EpollEvent::empty(); 256];
    let cpu0 = sys::cpu_seconds(std::process::id())?;
    let start = Instant::now();
    let due = |i: u64| start + Duration::from_secs_f64(i as f64 / f.per_second);
    let hard_end = start + f.duration + ANSWER_TIMEOUT + Duration::from_secs(1);
    let mut pending = Pending::default();
    let mut buf = [0u8; 64];
    let mut next = 0u64;
    let mut last_open = start;
    let mut last_scan = start;
    loop {
        let now = Instant::now();
        if now > hard_end {
            r.timeouts += pending.len as u64;
            break;
        }
        // Everything due (at 2,000/s, the one or two since the last wake-up).
        while next < total && due(next) <= now {
            next += 1;
            if pending.len >= MAX_PENDING {
                r.skipped += 1;
                continue;
            }
            match open(f) {
                Ok(t) => {
                    r.opened += 1;
                    last_open = Instant::now();
                    let i = pending.insert((t, last_open));
                    let conn = pending.slots[i].as_ref().map(|(t, _)| t);
                    let ev = EpollEvent::new(EpollFlags::EPOLLIN, i as u64);
                    if conn.is_none_or(|t| epoll.add(t, ev).is_err()) {
                        pending.remove(i);
                        r.connect_errors += 1;
                    }
                }
                Err(_) => r.connect_errors += 1,
            }
        }
        if next >= total && pending.len == 0 {
            break;
        }
        // 1 ms: epoll's resolution; at most two connections come due meanwhile.
        let n = epoll.wait(&mut events, 1u8).unwrap_or(0);
        for ev in &events[..n] {
            let Some((mut t, _)) = pending.remove(ev.data() as usize) else {
                continue;
            };
            match t.read(&mut buf) {
                Ok(0) | Err(_) => r.closed += 1,
                Ok(_) if buf[0] == 22 => r.answered += 1,
                Ok(_) => r.alerts += 1,
            }
        }
        if now.duration_since(last_scan) > Duration::from_millis(100) {
            last_scan = now;
            for i in 0..pending.slots.len() {
                if pending.slots[i]
                    .as_ref()
                    .is_some_and(|(_, at)| now.duration_since(*at) > ANSWER_TIMEOUT)
                {
                    pending.remove(i);
                    r.timeouts += 1;
                }
            }
        }
    }
    // N connections paced 1/rate apart span N/rate seconds.
    r.seconds = last_open.duration_since(start).as_secs_f64() + 1.0 / f.per_second;
    r.cpu_s = sys::cpu_seconds(std::process::id())? - cpu0;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Against a server that answers every other connection with a
    /// handshake record and the others with an alert or a close: each
    /// connection is opened once and classified by what came back.
    #[test]
    fn the_flooder_classifies_each_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            for (i, conn) in listener.incoming().take(30).enumerate() {
                let Ok(mut c) = conn else { continue };
                let mut hello = [0u8; 5];
                if c.read_exact(&mut hello).is_err() {
                    continue;
                }
                let _ = match i % 3 {
                    0 => c.write_all(&[22, 3, 3, 0, 0]),
                    1 => c.write_all(&[21, 3, 3, 0, 2, 2, 80]),
                    _ => Ok(()),
                };
            }
        });
        let r = flood(&Flood {
            port,
            source: Ipv4Addr::LOCALHOST,
            per_second: 300.0,
            duration: Duration::from_millis(100),
            hello: vec![22, 3, 1, 0, 0],
        })
        .expect("flood");
        server.join().expect("server");
        assert_eq!(r.opened, 30, "{r:?}");
        assert_eq!((r.answered, r.alerts, r.closed), (10, 10, 10), "{r:?}");
        assert_eq!(r.timeouts + r.connect_errors + r.skipped, 0, "{r:?}");
    }
}
