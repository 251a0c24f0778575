//! The I/O thread, its two bounded queues, deadlines and reconnection.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

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
pub enum Outcome<R> {
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
    pub outcome: Outcome<R>,
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

struct Shared<O, R, T> {
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
    shared: Arc<Shared<B::Op, B::Reply, T>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Backend, T: Send + 'static> Client<B, T> {
    /// Starts the I/O thread (named `name`); it connects on first use.
    pub fn start(name: &str, backend: B, config: Config) -> std::io::Result<Self> {
        let capacity = config.capacity.max(1);
        let shared = Arc::new(Shared {
            requests: ArrayQueue::new(capacity),
            completions: ArrayQueue::new(capacity),
            outstanding: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stats: Stats::default(),
            notify: OnceLock::new(),
        });
        let s = shared.clone();
        let thread = thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || IoThread::new(s, backend, config).run())?;
        Ok(Client {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `op`; its completion (with `token`) comes back by `timeout`
    /// from now. Lock-free; wakes the I/O thread only if it sleeps.
    pub fn submit(&self, op: B::Op, token: T, timeout: Duration) -> Result<(), (T, SubmitError)> {
        let s = &*self.shared;
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

    /// Takes one finished request back, if any.
    pub fn try_complete(&self) -> Option<Completion<B::Reply, T>> {
        let c = self.shared.completions.pop()?;
        self.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
        Some(c)
    }

    /// Submitted and not yet taken back.
    pub fn outstanding(&self) -> usize {
        self.shared.outstanding.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Sets what the I/O thread calls (on its own thread) after handing
    /// back completions, e.g. a wake-up of whoever takes them. Once only:
    /// false if one was set already.
    pub fn set_notify(&self, f: impl Fn() + Send + Sync + 'static) -> bool {
        self.shared.notify.set(Box::new(f)).is_ok()
    }
}

impl<B: Backend, T: Send + 'static> Client<B, T> {
    /// A handle that tells when the I/O thread has exited and released the
    /// connection (the thread holds the other reference to the queues).
    pub fn exit_watch(&self) -> Exited {
        let weak: std::sync::Weak<dyn Send + Sync> = {
            let a: Arc<dyn Send + Sync> = self.shared.clone();
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
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
        }
    }
}

struct IoThread<B: Backend, T> {
    /// First, so it is dropped (its connection closed) before `shared`:
    /// [`Exited`] then means the connection is gone too.
    backend: B,
    shared: Arc<Shared<B::Op, B::Reply, T>>,
    config: Config,
    backoff: Duration,
    /// No connection attempt before this (after a failure).
    next_attempt: Instant,
    last_error: String,
}

/// How long the idle I/O thread sleeps between looks at `stop` (a submit
/// wakes it at once).
const IDLE: Duration = Duration::from_millis(100);

impl<B: Backend, T: Send + 'static> IoThread<B, T> {
    fn new(shared: Arc<Shared<B::Op, B::Reply, T>>, backend: B, config: Config) -> Self {
        IoThread {
            shared,
            backend,
            backoff: config.min_backoff,
            config,
            next_attempt: Instant::now(),
            last_error: String::new(),
        }
    }

    fn run(mut self) {
        let mut batch: Vec<Request<B::Op, T>> = Vec::with_capacity(self.config.max_batch);
        let mut replies = Vec::with_capacity(self.config.max_batch);
        loop {
            while batch.len() < self.config.max_batch {
                match self.shared.requests.pop() {
                    Some(r) => batch.push(r),
                    None => break,
                }
            }
            if batch.is_empty() {
                if self.shared.stop.load(Ordering::Acquire) {
                    return;
                }
                // SeqCst here and in `submit`'s swap: the store of `sleeping`
                // must not pass the queue check below (nor the submitter's
                // push its swap), or both sides miss and a request waits
                // IDLE for nothing.
                self.shared.sleeping.store(true, Ordering::SeqCst);
                // Re-check after announcing sleep: a submit in between unparks.
                if self.shared.requests.is_empty() {
                    thread::park_timeout(IDLE);
                }
                self.shared.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            // A panic in a backend must not leave parked transactions
            // waiting for answers that never come: fail the batch, start
            // afresh with a new connection.
            let served =
                panic::catch_unwind(AssertUnwindSafe(|| self.serve(&mut batch, &mut replies)));
            if served.is_err() {
                self.shared.stats.panics.fetch_add(1, Ordering::Relaxed);
                self.backend.disconnect();
                self.fail_all(&mut batch, "the store client failed (a panic)");
            }
            if let Some(f) = self.shared.notify.get() {
                f();
            }
        }
    }

    /// Answers every request of `batch` (draining it).
    fn serve(
        &mut self,
        batch: &mut Vec<Request<B::Op, T>>,
        replies: &mut Vec<Result<B::Reply, String>>,
    ) {
        let now = Instant::now();
        // Expired while queued (behind a slow round trip), in one O(n)
        // pass. The rest keep their order: a dry run's release may follow
        // its decision in one batch. (`Vec::extract_if` needs Rust 1.87,
        // above the workspace's rust-version.)
        if batch.iter().any(|r| r.deadline <= now) {
            let all = std::mem::replace(batch, Vec::with_capacity(batch.len()));
            for r in all {
                if r.deadline <= now {
                    self.complete(r, Outcome::Timeout);
                } else {
                    batch.push(r);
                }
            }
        }
        let Some(deadline) = batch.iter().map(|r| r.deadline).min() else {
            return;
        };
        if self.shared.stop.load(Ordering::Acquire) {
            return self.fail_all(batch, "the store client is stopping");
        }
        if !self.backend.is_connected() {
            if now < self.next_attempt {
                let why = format!("store unavailable (reconnecting): {}", self.last_error);
                return self.fail_all(batch, &why);
            }
            let until = deadline.min(now + self.config.connect_timeout);
            self.shared.stats.connects.fetch_add(1, Ordering::Relaxed);
            match self.backend.connect(until) {
                Ok(()) => {}
                Err(BatchError::Timeout) => {
                    self.shared
                        .stats
                        .connect_failures
                        .fetch_add(1, Ordering::Relaxed);
                    self.failed("timed out connecting".into());
                    for r in batch.drain(..) {
                        self.complete(r, Outcome::Timeout);
                    }
                    return;
                }
                Err(BatchError::Failed(e)) => {
                    self.shared
                        .stats
                        .connect_failures
                        .fetch_add(1, Ordering::Relaxed);
                    self.failed(e);
                    let why = format!("cannot connect to the store: {}", self.last_error);
                    return self.fail_all(batch, &why);
                }
            }
        }
        replies.clear();
        let ops: Vec<&B::Op> = batch.iter().map(|r| &r.op).collect();
        let result = self.backend.run(&ops, deadline, replies);
        drop(ops);
        self.shared
            .stats
            .round_trips
            .fetch_add(1, Ordering::Relaxed);
        self.shared
            .stats
            .sent
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match result {
            Ok(()) if replies.len() == batch.len() => {
                self.backoff = self.config.min_backoff;
                for (r, reply) in batch.drain(..).zip(replies.drain(..)) {
                    let outcome = match reply {
                        Ok(v) => Outcome::Reply(v),
                        Err(e) => Outcome::Error(e),
                    };
                    self.complete(r, outcome);
                }
            }
            Ok(()) => {
                self.backend.disconnect();
                self.failed("answers and requests differ in number".into());
                self.fail_all(
                    batch,
                    "protocol error: answers and requests differ in number",
                );
            }
            Err(BatchError::Timeout) => {
                // Late answers would arrive out of step: start afresh.
                self.backend.disconnect();
                self.failed("timed out".into());
                for r in batch.drain(..) {
                    self.complete(r, Outcome::Timeout);
                }
            }
            Err(BatchError::Failed(e)) => {
                self.backend.disconnect();
                self.failed(e);
                let why = format!("store request failed: {}", self.last_error);
                self.fail_all(batch, &why);
            }
        }
    }

    fn failed(&mut self, e: String) {
        self.next_attempt = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(self.config.max_backoff);
        self.last_error = e;
    }

    fn fail_all(&self, batch: &mut Vec<Request<B::Op, T>>, why: &str) {
        for r in batch.drain(..) {
            self.complete(r, Outcome::Error(why.to_owned()));
        }
    }

    fn complete(&self, r: Request<B::Op, T>, outcome: Outcome<B::Reply>) {
        let c = Completion {
            token: r.token,
            outcome,
            submitted: r.submitted,
        };
        // `outstanding` bounds the completions too: there is always room.
        if self.shared.completions.push(c).is_err() {
            self.shared.stats.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}
