//! The I/O thread, its two bounded queues, deadlines and reconnection.
//!
//! Here: the client's handle and the queues it shares with its thread;
//! the thread's loop is `io.rs`.

mod io;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use io::IoThread;

/// A store protocol: what one round trip does.
pub trait Backend: Send + 'static {
    type Op: Send + 'static;
    type Reply: Send + 'static;

    fn is_connected(&self) -> bool;
    /// Opens the connection (and prepares it, e.g. loads scripts) by `deadline`.
    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError>;
    fn disconnect(&mut self);
    /// Sends `ops` in one round trip and pushes one result per op to `out`,
    /// in order, by `deadline`. `Err`: the connection is unusable and no op
    /// has an answer (the caller disconnects).
    fn run(
        &mut self,
        ops: &[&Self::Op],
        deadline: Instant,
        out: &mut Vec<Result<Self::Reply, String>>,
    ) -> Result<(), BatchError>;
}

/// Why a whole round trip failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// No answer by the deadline.
    Timeout,
    /// Connection refused, reset, closed, or a protocol error.
    Failed(String),
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<R> {
    Reply(R),
    /// The store answered with an error, the connection failed, or the store
    /// is unreachable (reconnecting, or the queue was full).
    Error(String),
    /// No answer by the request's deadline.
    Timeout,
}

/// A finished request, with the caller's token.
pub struct Completion<R, T> {
    pub token: T,
    pub answer: Answer<R>,
    /// When it was submitted (latency = completion time - this).
    pub submitted: Instant,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Most requests submitted and not yet taken back as completions.
    pub capacity: usize,
    /// Most requests in one round trip.
    pub max_batch: usize,
    /// First wait after a failure before reconnecting; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Longest a connection attempt may take (also bounded by the requests' deadlines).
    pub connect_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            capacity: 16_384,
            max_batch: 512,
            min_backoff: Duration::from_millis(10),
            // "Normal service within a second of the store returning."
            max_backoff: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(200),
        }
    }
}

/// Counters of the I/O thread (readable from any thread).
#[derive(Debug, Default)]
pub struct Stats {
    pub round_trips: AtomicU64,
    /// Requests sent in those round trips.
    pub sent: AtomicU64,
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Batches failed by a panic in the backend.
    pub panics: AtomicU64,
    /// Completions lost because their queue was full (cannot happen while
    /// `outstanding` bounds it; counted rather than logged, as this thread
    /// may not call into ATS).
    pub lost: AtomicU64,
}

/// Why [`Client::submit`] gave the token back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// `capacity` requests are outstanding.
    Full,
    /// The I/O thread has stopped.
    Stopped,
}

struct Request<O, T> {
    op: O,
    token: T,
    deadline: Instant,
    submitted: Instant,
}

struct Inner<O, R, T> {
    requests: ArrayQueue<Request<O, T>>,
    completions: ArrayQueue<Completion<R, T>>,
    /// Submitted and not yet taken back: bounds both queues together, so a
    /// completion always finds room.
    outstanding: AtomicUsize,
    sleeping: AtomicBool,
    stop: AtomicBool,
    stats: Stats,
    /// Called by the I/O thread after it has handed back completions.
    notify: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// A store client: one I/O thread, two bounded queues.
pub struct Client<B: Backend, T: Send + 'static> {
    inner: Arc<Inner<B::Op, B::Reply, T>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Backend, T: Send + 'static> Client<B, T> {
    /// Starts the I/O thread (named `name`); it connects on first use.
    pub fn start(name: &str, backend: B, config: Config) -> std::io::Result<Self> {
        let capacity = config.capacity.max(1);
        let inner = Arc::new(Inner {
            requests: ArrayQueue::new(capacity),
            completions: ArrayQueue::new(capacity),
            outstanding: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stats: Stats::default(),
            notify: OnceLock::new(),
        });
        let s = inner.clone();
        let thread = thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || IoThread::new(s, backend, config).run())?;
        Ok(Client {
            inner,
            thread: Some(thread),
        })
    }

    /// Queues `op`; its completion (with `token`) comes back by `timeout`
    /// from now. Lock-free; wakes the I/O thread only if it sleeps.
    pub fn submit(&self, op: B::Op, token: T, timeout: Duration) -> Result<(), (T, SubmitError)> {
        let s = &*self.inner;
        if s.stop.load(Ordering::Acquire) {
            return Err((token, SubmitError::Stopped));
        }
        let cap = s.requests.capacity();
        if s.outstanding.fetch_add(1, Ordering::AcqRel) >= cap {
            s.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err((token, SubmitError::Full));
        }
        let now = Instant::now();
        let req = Request {
            op,
            token,
            deadline: now + timeout,
            submitted: now,
        };
        if let Err(req) = s.requests.push(req) {
            // Cannot happen while `outstanding` bounds the queue; be safe.
            s.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err((req.token, SubmitError::Full));
        }
        if s.sleeping.swap(false, Ordering::SeqCst) {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
        Ok(())
    }

    /// Hands the finished requests to `f`, at most `max` of them, so one
    /// pass of a drainer on an ATS thread stays short (the rest wait for
    /// its next pass).
    pub fn drain(&self, max: usize, mut f: impl FnMut(Completion<B::Reply, T>)) {
        for _ in 0..max {
            let Some(c) = self.try_complete() else { break };
            f(c);
        }
    }

    /// Takes one finished request back, if any.
    pub fn try_complete(&self) -> Option<Completion<B::Reply, T>> {
        let c = self.inner.completions.pop()?;
        self.inner.outstanding.fetch_sub(1, Ordering::AcqRel);
        Some(c)
    }

    /// Submitted and not yet taken back.
    pub fn outstanding(&self) -> usize {
        self.inner.outstanding.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Sets what the I/O thread calls (on its own thread) after handing
    /// back completions, e.g. a wake-up of whoever takes them. Once only:
    /// false if one was set already.
    pub fn set_notify(&self, f: impl Fn() + Send + Sync + 'static) -> bool {
        self.inner.notify.set(Box::new(f)).is_ok()
    }
}

impl<B: Backend, T: Send + 'static> Client<B, T> {
    /// A handle that tells when the I/O thread has exited and released the
    /// connection (the thread holds the other reference to the queues).
    pub fn exit_watch(&self) -> Exited {
        let weak: std::sync::Weak<dyn Send + Sync> = {
            let a: Arc<dyn Send + Sync> = self.inner.clone();
            Arc::downgrade(&a)
        };
        Exited(weak)
    }
}

/// See [`Client::exit_watch`].
pub struct Exited(std::sync::Weak<dyn Send + Sync>);

impl Exited {
    /// True once the I/O thread has returned (its connection closed).
    pub fn done(&self) -> bool {
        self.0.strong_count() == 0
    }
}

impl<B: Backend, T: Send + 'static> Drop for Client<B, T> {
    /// Tells the I/O thread to stop and lets it go without waiting: the
    /// last client of a rule may be dropped on an ATS net thread (a
    /// transaction's lease, a rule deleted by a reload), which must not wait
    /// for a round trip. The thread finishes its current round trip
    /// (bounded by the requests' deadlines), then fails what is still
    /// queued, exits and closes its connection.
    ///
    /// Safety of the tokens: what is still in the queues at exit (requests
    /// and completions not taken, with their tokens) is dropped on the I/O
    /// thread, which must never touch a transaction. That is safe only
    /// because every token that carries a parked transaction also holds
    /// the client (through its store, e.g. its rule), so the client cannot
    /// be dropped while such a token is queued; the tokens left at exit
    /// carry no transaction.
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
        }
    }
}
