//! Client connections: one thread each (small stack), at most
//! `max_connections` of them. A connection's memory is fixed: a read buffer,
//! the current line (at most `max_line` bytes) and the answers to one read.
//! A client that stops reading blocks only its own thread, until the write
//! timeout closes it.
//!
//! Silent clients cannot lock others out: a connection silent for
//! `idle_timeout` is closed, and when `max_connections` are open a new one
//! closes the longest-silent connection if it has been silent for at least
//! [`EVICT_AFTER`] (otherwise the new one is closed at once).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dthrottle::{Buckets, Decision};

use crate::config::{Config, OnFull};

const READ_BUF: usize = 16 * 1024;
const STACK: usize = 128 * 1024;
/// Silence after which a connection may be closed to admit a new one when
/// `max_connections` are open. Active clients are never churned by a flood
/// of new connections; silent ones make room within this.
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// Daemon-wide counters.
#[derive(Default)]
pub struct Counters {
    pub ok: AtomicU64,
    pub no: AtomicU64,
    pub full: AtomicU64,
    pub long_lines: AtomicU64,
    pub empty_lines: AtomicU64,
    pub connections: AtomicU64,
    pub refused_connections: AtomicU64,
    /// Silent connections closed to admit a new one.
    pub evicted_connections: AtomicU64,
    pub write_timeouts: AtomicU64,
    pub active: AtomicUsize,
}

pub struct Server {
    pub buckets: Buckets,
    pub counters: Counters,
    max_line: usize,
    max_connections: usize,
    write_timeout: Duration,
    idle_timeout: Option<Duration>,
    on_full: OnFull,
    /// The open connections (at most `max_connections`).
    conns: Mutex<Vec<Slot>>,
    next_id: AtomicU64,
    epoch: Instant,
}

/// An open connection: when it last read something (ms since `epoch`),
/// and how to close it from another thread.
struct Slot {
    id: u64,
    last: Arc<AtomicU64>,
    close: Box<dyn Fn() + Send>,
}

/// A connected stream (TCP or Unix).
pub trait Stream: Read + Write + Send + 'static {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()>;
    /// Closes the connection from another thread (its reader sees EOF).
    fn closer(&self) -> io::Result<Box<dyn Fn() + Send>>;
}

impl Stream for std::net::TcpStream {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()> {
        self.set_nodelay(true)?;
        self.set_read_timeout(read)?;
        self.set_write_timeout(Some(write))
    }

    fn closer(&self) -> io::Result<Box<dyn Fn() + Send>> {
        let s = self.try_clone()?;
        Ok(Box::new(move || {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }))
    }
}

impl Stream for std::os::unix::net::UnixStream {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()> {
        self.set_read_timeout(read)?;
        self.set_write_timeout(Some(write))
    }

    fn closer(&self) -> io::Result<Box<dyn Fn() + Send>> {
        let s = self.try_clone()?;
        Ok(Box::new(move || {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }))
    }
}

/// Gives back the connection's place when its thread ends, however.
struct Place<'a>(&'a Server, u64);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.counters.active.fetch_sub(1, Ordering::Relaxed);
        self.0.conns().retain(|s| s.id != self.1);
    }
}

impl Server {
    pub fn new(c: &Config) -> Server {
        Server {
            buckets: Buckets::new(dthrottle::Config {
                burst: c.burst,
                rate: c.rate,
                max_tags: c.max_tags,
                max_report_tags: c.max_report_tags,
            }),
            counters: Counters::default(),
            max_line: c.max_line,
            max_connections: c.max_connections,
            write_timeout: c.write_timeout,
            idle_timeout: c.idle_timeout,
            on_full: c.on_full,
            conns: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn conns(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic elsewhere leaves the list consistent (push/retain only).
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for a new connection: true if there is a place, or the
    /// longest-silent connection was silent for [`EVICT_AFTER`] and closed.
    fn admit(&self, slot: Slot) -> bool {
        let mut conns = self.conns();
        if conns.len() >= self.max_connections {
            let now = self.ms();
            let evict_after = EVICT_AFTER.as_millis() as u64;
            let victim = conns
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.last.load(Ordering::Relaxed))
                .filter(|(_, s)| now.saturating_sub(s.last.load(Ordering::Relaxed)) >= evict_after)
                .map(|(i, _)| i);
            let Some(i) = victim else { return false };
            let v = conns.swap_remove(i);
            (v.close)();
            self.counters
                .evicted_connections
                .fetch_add(1, Ordering::Relaxed);
        }
        conns.push(slot);
        true
    }

    /// Serves `stream` on a thread of its own, or closes it at once when
    /// `max_connections` are open.
    pub fn spawn<S: Stream>(self: &Arc<Self>, stream: S) {
        let c = &self.counters;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let last = Arc::new(AtomicU64::new(self.ms()));
        let admitted = stream.closer().is_ok_and(|close| {
            self.admit(Slot {
                id,
                last: last.clone(),
                close,
            })
        });
        if !admitted {
            c.refused_connections.fetch_add(1, Ordering::Relaxed);
            return;
        }
        c.connections.fetch_add(1, Ordering::Relaxed);
        c.active.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("dthrottled-conn".into())
            .stack_size(STACK)
            .spawn(move || {
                let _place = Place(&me, id);
                let _ = me.serve(stream, &last);
            });
        if started.is_err() {
            // No thread: the stream was dropped (closed) with the closure.
            c.active.fetch_sub(1, Ordering::Relaxed);
            self.conns().retain(|s| s.id != id);
            c.refused_connections.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Answers every line read, in order, one write per read.
    fn serve<S: Stream>(&self, mut s: S, last: &AtomicU64) -> io::Result<()> {
        s.timeouts(self.idle_timeout, self.write_timeout)?;
        let mut buf = vec![0u8; READ_BUF];
        let mut line: Vec<u8> = Vec::with_capacity(self.max_line);
        // The line being read is over max_line: skip to its end, answer NO.
        let mut skipping = false;
        let mut out: Vec<u8> = Vec::with_capacity(READ_BUF * 3);
        let mut local = Tally::default();
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    last.store(self.ms(), Ordering::Relaxed);
                    n
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    local.flush(&self.counters);
                    return Err(e);
                }
            };
            let mut rest = &buf[..n];
            while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                let piece = &rest[..nl];
                rest = &rest[nl + 1..];
                if skipping || line.len() + piece.len() > self.max_line {
                    skipping = false;
                    line.clear();
                    local.long_lines += 1;
                    out.extend_from_slice(b"NO\n");
                } else if line.is_empty() {
                    out.extend_from_slice(self.answer(piece, &mut local));
                } else {
                    line.extend_from_slice(piece);
                    let answer = self.answer(&line, &mut local);
                    out.extend_from_slice(answer);
                    line.clear();
                }
            }
            if !skipping {
                if line.len() + rest.len() > self.max_line {
                    skipping = true;
                    line.clear();
                } else {
                    line.extend_from_slice(rest);
                }
            }
            if !out.is_empty() {
                if let Err(e) = s.write_all(&out) {
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) {
                        local.write_timeouts += 1;
                    }
                    local.flush(&self.counters);
                    return Err(e);
                }
                out.clear();
            }
            local.flush(&self.counters);
        }
        local.flush(&self.counters);
        Ok(())
    }

    fn answer(&self, tag: &[u8], t: &mut Tally) -> &'static [u8] {
        let tag = tag.strip_suffix(b"\r").unwrap_or(tag);
        if tag.is_empty() {
            t.empty_lines += 1;
            return b"NO\n";
        }
        let ok = match self.buckets.decide(tag) {
            Decision::Ok => true,
            Decision::No => false,
            Decision::Full => {
                t.full += 1;
                self.on_full == OnFull::Serve
            }
        };
        if ok {
            t.ok += 1;
            b"OK\n"
        } else {
            t.no += 1;
            b"NO\n"
        }
    }
}

/// A connection's counts, added to the shared counters once per read (not
/// per decision: threads would fight over the counters' cache lines).
#[derive(Default)]
struct Tally {
    ok: u64,
    no: u64,
    full: u64,
    long_lines: u64,
    empty_lines: u64,
    write_timeouts: u64,
}

impl Tally {
    fn flush(&mut self, c: &Counters) {
        for (n, counter) in [
            (self.ok, &c.ok),
            (self.no, &c.no),
            (self.full, &c.full),
            (self.long_lines, &c.long_lines),
            (self.empty_lines, &c.empty_lines),
            (self.write_timeouts, &c.write_timeouts),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        *self = Tally::default();
    }
}
