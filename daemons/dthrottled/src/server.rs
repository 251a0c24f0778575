//! Client connections: one thread each (small stack), at most
//! `max_connections` of them. A connection's memory is fixed: a read buffer,
//! the current line (at most `max_line` bytes) and the answers to one read.
//! A client that stops reading blocks only its own thread, until the write
//! timeout closes it.
//!
//! Silent clients cannot lock others out: a connection silent for
//! `idle_timeout` is closed, and when `max_connections` are open a new one
//! closes the longest-silent connection that never sent a whole line, if
//! silent for [`EVICT_UNANSWERED_AFTER`]; failing that, the longest-silent
//! one, if silent for [`Server::evict_after`] (a tenth of `idle_timeout`,
//! at least [`MIN_EVICT_AFTER`]). Otherwise the new one is closed at once,
//! so a flood of new connections cannot churn out clients that ask now and
//! then.
//!
//! One file descriptor per connection: the stream is shared (an `Arc`)
//! between its thread and the closer, never duplicated.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dthrottle::{Buckets, Decision};

use crate::config::{Config, OnFull};

const READ_BUF: usize = 16 * 1024;
const STACK: usize = 128 * 1024;
/// Silence after which a connection that never sent a whole line may be
/// closed to admit a new one when `max_connections` are open.
pub const EVICT_UNANSWERED_AFTER: Duration = Duration::from_secs(1);
/// Least silence after which a connection that did send lines may be
/// closed to admit a new one (see [`Server::evict_after`]).
pub const MIN_EVICT_AFTER: Duration = Duration::from_secs(30);

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
    evict_after: Duration,
    on_full: OnFull,
    /// The open connections (at most `max_connections`).
    conns: Mutex<Vec<Slot>>,
    next_id: AtomicU64,
    epoch: Instant,
}

/// What other threads see of a connection: when it last read something (ms
/// since `epoch`) and whether it ever sent a whole line.
#[derive(Default)]
struct Activity {
    last: AtomicU64,
    answered: AtomicBool,
}

/// An open connection: its activity, and how to close it from another
/// thread (the shared stream, not a duplicated descriptor).
struct Slot {
    id: u64,
    activity: Arc<Activity>,
    close: Box<dyn Fn() + Send>,
}

/// A connected stream (TCP or Unix), used through a shared reference so
/// that one descriptor serves both the connection's thread and its closer.
pub trait Stream: Send + Sync + 'static {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()>;
    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_all_of(&self, buf: &[u8]) -> io::Result<()>;
    /// Closes the connection from another thread (its reader sees EOF).
    fn shut(&self);
}

impl Stream for std::net::TcpStream {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()> {
        self.set_nodelay(true)?;
        self.set_read_timeout(read)?;
        self.set_write_timeout(Some(write))
    }

    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self).read(buf)
    }

    fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
        (&mut &*self).write_all(buf)
    }

    fn shut(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

impl Stream for std::os::unix::net::UnixStream {
    fn timeouts(&self, read: Option<Duration>, write: Duration) -> io::Result<()> {
        self.set_read_timeout(read)?;
        self.set_write_timeout(Some(write))
    }

    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self).read(buf)
    }

    fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
        (&mut &*self).write_all(buf)
    }

    fn shut(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
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
            evict_after: Server::evict_after(c.idle_timeout),
            on_full: c.on_full,
            conns: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Silence after which a connection that sent lines may be closed to
    /// admit a new one: a tenth of `idle_timeout`, at least
    /// [`MIN_EVICT_AFTER`] (and that when there is no idle timeout).
    pub fn evict_after(idle_timeout: Option<Duration>) -> Duration {
        idle_timeout.map_or(MIN_EVICT_AFTER, |t| (t / 10).max(MIN_EVICT_AFTER))
    }

    fn conns(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic elsewhere leaves the list consistent (push/retain only).
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for a new connection: true if there is a place, or a
    /// connection silent long enough (see the module's doc) was closed.
    fn admit(&self, slot: Slot) -> bool {
        let mut conns = self.conns();
        if conns.len() >= self.max_connections {
            let now = self.ms();
            let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            // The longest-silent connection among those `which` accepts,
            // if silent for `after`.
            let silent = |which: &dyn Fn(&Slot) -> bool, after: u64| {
                conns
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| which(s))
                    .min_by_key(|(_, s)| s.activity.last.load(Ordering::Relaxed))
                    .filter(|(_, s)| {
                        now.saturating_sub(s.activity.last.load(Ordering::Relaxed)) >= after
                    })
                    .map(|(i, _)| i)
            };
            let victim = silent(
                &|s| !s.activity.answered.load(Ordering::Relaxed),
                ms(EVICT_UNANSWERED_AFTER),
            )
            .or_else(|| silent(&|_| true, ms(self.evict_after)));
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
        let activity = Arc::new(Activity {
            last: AtomicU64::new(self.ms()),
            answered: AtomicBool::new(false),
        });
        let stream = Arc::new(stream);
        let closer = stream.clone();
        let admitted = self.admit(Slot {
            id,
            activity: activity.clone(),
            close: Box::new(move || closer.shut()),
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
                let _ = me.serve(&*stream, &activity);
            });
        if started.is_err() {
            // No thread: the stream closes when its slot (the last owner) goes.
            c.active.fetch_sub(1, Ordering::Relaxed);
            self.conns().retain(|s| s.id != id);
            c.refused_connections.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Serves `stream` on the calling thread, as a connection's own thread
    /// does, outside the table of open connections: the line protocol's
    /// fuzz target (`fuzz/fuzz_targets/dthrottled_lines.rs`).
    #[doc(hidden)]
    pub fn serve_here<S: Stream>(&self, stream: &S) -> io::Result<()> {
        self.serve(stream, &Activity::default())
    }

    /// Answers every line read, in order, one write per read.
    fn serve<S: Stream>(&self, s: &S, activity: &Activity) -> io::Result<()> {
        s.timeouts(self.idle_timeout, self.write_timeout)?;
        let mut buf = vec![0u8; READ_BUF];
        let mut line: Vec<u8> = Vec::with_capacity(self.max_line);
        // The line being read is over max_line: skip to its end, answer NO.
        let mut skipping = false;
        let mut out: Vec<u8> = Vec::with_capacity(READ_BUF * 3);
        let mut local = Tally::default();
        loop {
            let n = match s.read_into(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    activity.last.store(self.ms(), Ordering::Relaxed);
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
                if !activity.answered.load(Ordering::Relaxed) {
                    activity.answered.store(true, Ordering::Relaxed);
                }
                if let Err(e) = s.write_all_of(&out) {
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
