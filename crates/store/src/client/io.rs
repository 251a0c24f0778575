//! The I/O thread's loop: batches, deadlines, reconnection with backoff.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{Answer, Backend, BatchError, Completion, Config, Inner, Request};

pub(super) struct IoThread<B: Backend, T> {
    /// First, so it is dropped (its connection closed) before `inner`:
    /// [`Exited`] then means the connection is gone too.
    backend: B,
    inner: Arc<Inner<B::Op, B::Reply, T>>,
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
    pub(super) fn new(inner: Arc<Inner<B::Op, B::Reply, T>>, backend: B, config: Config) -> Self {
        IoThread {
            inner,
            backend,
            backoff: config.min_backoff,
            config,
            next_attempt: Instant::now(),
            last_error: String::new(),
        }
    }

    pub(super) fn run(mut self) {
        let mut batch: Vec<Request<B::Op, T>> = Vec::with_capacity(self.config.max_batch);
        let mut replies = Vec::with_capacity(self.config.max_batch);
        loop {
            while batch.len() < self.config.max_batch {
                match self.inner.requests.pop() {
                    Some(r) => batch.push(r),
                    None => break,
                }
            }
            if batch.is_empty() {
                if self.inner.stop.load(Ordering::Acquire) {
                    return;
                }
                // SeqCst here and in `submit`'s swap: the store of `sleeping`
                // must not pass the queue check below (nor the submitter's
                // push its swap), or both sides miss and a request waits
                // IDLE for nothing.
                self.inner.sleeping.store(true, Ordering::SeqCst);
                // Re-check after announcing sleep: a submit in between unparks.
                if self.inner.requests.is_empty() {
                    thread::park_timeout(IDLE);
                }
                self.inner.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            // A panic in a backend must not leave parked transactions
            // waiting for answers that never come: fail the batch, start
            // afresh with a new connection.
            let served =
                panic::catch_unwind(AssertUnwindSafe(|| self.serve(&mut batch, &mut replies)));
            if served.is_err() {
                self.inner.stats.panics.fetch_add(1, Ordering::Relaxed);
                self.backend.disconnect();
                self.fail_all(&mut batch, "the store client failed (a panic)");
            }
            if let Some(f) = self.inner.notify.get() {
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
                    self.complete(r, Answer::Timeout);
                } else {
                    batch.push(r);
                }
            }
        }
        let Some(deadline) = batch.iter().map(|r| r.deadline).min() else {
            return;
        };
        if self.inner.stop.load(Ordering::Acquire) {
            return self.fail_all(batch, "the store client is stopping");
        }
        if !self.backend.is_connected() {
            if now < self.next_attempt {
                let why = format!("store unavailable (reconnecting): {}", self.last_error);
                return self.fail_all(batch, &why);
            }
            let until = deadline.min(now + self.config.connect_timeout);
            self.inner.stats.connects.fetch_add(1, Ordering::Relaxed);
            match self.backend.connect(until) {
                Ok(()) => {}
                Err(BatchError::Timeout) => {
                    self.inner
                        .stats
                        .connect_failures
                        .fetch_add(1, Ordering::Relaxed);
                    self.failed("timed out connecting".into());
                    for r in batch.drain(..) {
                        self.complete(r, Answer::Timeout);
                    }
                    return;
                }
                Err(BatchError::Failed(e)) => {
                    self.inner
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
        self.inner.stats.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner
            .stats
            .sent
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match result {
            Ok(()) if replies.len() == batch.len() => {
                self.backoff = self.config.min_backoff;
                for (r, reply) in batch.drain(..).zip(replies.drain(..)) {
                    let answer = match reply {
                        Ok(v) => Answer::Reply(v),
                        Err(e) => Answer::Error(e),
                    };
                    self.complete(r, answer);
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
                    self.complete(r, Answer::Timeout);
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
            self.complete(r, Answer::Error(why.to_owned()));
        }
    }

    fn complete(&self, r: Request<B::Op, T>, answer: Answer<B::Reply>) {
        let c = Completion {
            token: r.token,
            answer,
            submitted: r.submitted,
        };
        // `outstanding` bounds the completions too: there is always room.
        if self.inner.completions.push(c).is_err() {
            self.inner.stats.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}
