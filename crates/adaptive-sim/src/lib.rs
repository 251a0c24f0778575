//! A model origin to run crates/adaptive's controller against (the
//! simulation tests' in `crates/adaptive/tests/sim/`, and `ats-bench
//! plots`'): an origin of capacity C (processor sharing: each request's
//! work is L0 at full speed, and n > C requests in flight each run at C/n,
//! so the latency is L0 up to C in flight and L0·n/C beyond; optionally
//! each request's work jittered around L0), closed-loop
//! clients that send again as soon as they are answered, and a
//! `limits::Slots` at the learned limit queueing the rest FIFO, as the
//! plugins do. Event-driven on a `ManualClock`: exact and deterministic.
//! [`trace`] records a run for plots, [`settle`] judges one.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use adaptive::{Config, Controller, Outcome, State};
use limits::{ManualClock, Nanos, Permit, Slots, Waiter, NANOS_PER_MS, NANOS_PER_SEC};

mod trace;

pub use trace::{settle, settled, trace, Sample, STEP};

type Sink = Arc<Mutex<Vec<(usize, Permit<Admit>)>>>;

/// A queued client; admitted, it goes to the sink for the loop to send.
pub struct Admit {
    client: usize,
    sink: Sink,
}

impl Waiter for Admit {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        self.sink.lock().push((self.client, permit));
        Ok(())
    }
}

/// How the origin answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Processor sharing, every request answered.
    Sharing,
    /// Every request fails after 2 ms.
    FailFast,
    /// Requests beyond C in flight fail after 2 ms; the rest are shared.
    Shedding,
}

const FAIL_AFTER: Nanos = 2 * NANOS_PER_MS;

struct Req {
    client: usize,
    sent: Nanos,
    /// Slots held when it was sent, itself included.
    inflight: u32,
    permit: Permit<Admit>,
    /// The shared work done when it is complete (processor sharing).
    done: f64,
    /// When it fails (failing requests).
    fails_at: Nanos,
}

/// The origin, its clients and the controller, on one manual clock.
pub struct Sim {
    clock: Arc<ManualClock>,
    pub ctl: Controller<Arc<ManualClock>>,
    slots: Arc<Slots<Admit>>,
    sink: Sink,
    /// By the work done when each is complete (its bits: positive f64s
    /// order as their bits do), then by arrival.
    sharing: BTreeMap<(u64, u64), Req>,
    sent: u64,
    failing: VecDeque<Req>,
    /// Work each shared request has had since the start (ns at full speed):
    /// all progress at the same rate, so the one whose `done` is least is
    /// done first.
    work: f64,
    now: Nanos,
    capacity: f64,
    latency: Nanos,
    mode: Mode,
    /// Clients below this id send again when answered.
    clients: usize,
    busy: Vec<bool>,
    /// Most origin requests in flight since the last `take_peak`.
    peak: usize,
    /// Each request's work is the latency times 1 ± up to this.
    jitter: f64,
    /// The jitter's generator (xorshift64*): deterministic.
    rng: u64,
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Nanos {
    n * NANOS_PER_MS
}

/// `n` seconds.
pub fn secs(n: u64) -> Nanos {
    n * NANOS_PER_SEC
}

impl Sim {
    /// An origin of `capacity` and no-load `latency`, no clients yet.
    pub fn new(config: Config, capacity: u32, latency: Nanos) -> Sim {
        let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
        let ctl = Controller::new(config, clock.clone());
        let slots = Slots::new(ctl.limit());
        Sim {
            clock,
            ctl,
            slots,
            sink: Arc::default(),
            sharing: BTreeMap::new(),
            sent: 0,
            jitter: 0.0,
            rng: 0x9E37_79B9_7F4A_7C15,
            failing: VecDeque::new(),
            work: 0.0,
            now: NANOS_PER_SEC,
            capacity: f64::from(capacity),
            latency,
            mode: Mode::Sharing,
            clients: 0,
            busy: Vec::new(),
            peak: 0,
        }
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Nanos {
        self.now - NANOS_PER_SEC
    }

    pub fn state(&self) -> State {
        self.ctl.state()
    }

    pub fn set_capacity(&mut self, capacity: u32) {
        self.capacity = f64::from(capacity);
    }

    /// The no-load latency of requests sent from now on.
    pub fn set_latency(&mut self, latency: Nanos) {
        self.latency = latency;
    }

    /// Each request's work from now on: the latency times a uniform
    /// 1 - `jitter` to 1 + `jitter`, so requests no longer end in order.
    pub fn set_jitter(&mut self, jitter: f64) {
        self.jitter = jitter;
    }

    fn spread(&mut self) -> f64 {
        if self.jitter == 0.0 {
            return 1.0;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let u = (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + self.jitter * (2.0 * u - 1.0)
    }

    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Idle clients below `n` start now; those at or above stop once answered.
    pub fn set_clients(&mut self, n: usize) {
        self.clients = n;
        if self.busy.len() < n {
            self.busy.resize(n, false);
        }
        for c in 0..n {
            if !self.busy[c] {
                self.request(c);
            }
        }
    }

    /// The most origin requests in flight since the last call.
    pub fn take_peak(&mut self) -> usize {
        std::mem::replace(&mut self.peak, self.sharing.len() + self.failing.len())
    }

    /// Runs until `elapsed()` is `t`.
    pub fn run_to(&mut self, t: Nanos) {
        let end = t + NANOS_PER_SEC;
        while self.now < end {
            let n = self.sharing.len() as f64;
            let rate = if n <= self.capacity {
                1.0
            } else {
                self.capacity / n
            };
            let shared = self
                .sharing
                .values()
                .next()
                .map(|r| self.now + ((r.done - self.work) / rate).max(0.0).ceil() as Nanos);
            let failed = self.failing.front().map(|r| r.fails_at);
            let next = [shared, failed, Some(end)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end);
            self.work += (next - self.now) as f64 * rate;
            self.now = next;
            self.clock.set(next);
            while self
                .sharing
                .values()
                .next()
                .is_some_and(|r| r.done <= self.work + 1e-6)
            {
                if let Some((_, r)) = self.sharing.pop_first() {
                    self.complete(r, false);
                }
            }
            while self.failing.front().is_some_and(|r| r.fails_at <= self.now) {
                if let Some(r) = self.failing.pop_front() {
                    self.complete(r, true);
                }
            }
        }
    }

    fn request(&mut self, client: usize) {
        self.busy[client] = true;
        match self.slots.try_acquire() {
            Some(permit) => self.send(client, permit),
            // Dropping the ticket leaves the waiter queued.
            None => drop(self.slots.enqueue(Admit {
                client,
                sink: self.sink.clone(),
            })),
        }
        self.flush();
    }

    /// Sends the clients admitted from the queue.
    fn flush(&mut self) {
        loop {
            let admitted = std::mem::take(&mut *self.sink.lock());
            if admitted.is_empty() {
                return;
            }
            for (client, permit) in admitted {
                self.send(client, permit);
            }
        }
    }

    fn send(&mut self, client: usize, permit: Permit<Admit>) {
        let req = Req {
            client,
            sent: self.now,
            inflight: self.slots.active(),
            permit,
            done: self.work + self.latency as f64 * self.spread(),
            fails_at: self.now + FAIL_AFTER,
        };
        let shed = self.mode == Mode::Shedding && self.sharing.len() as f64 >= self.capacity;
        if self.mode == Mode::FailFast || shed {
            self.failing.push_back(req);
        } else {
            self.sent += 1;
            self.sharing.insert((req.done.to_bits(), self.sent), req);
        }
        self.peak = self.peak.max(self.sharing.len() + self.failing.len());
    }

    fn complete(&mut self, req: Req, failed: bool) {
        let inflight = req.inflight.max(self.slots.active());
        let outcome = if failed {
            Outcome::Failed
        } else {
            Outcome::Answered(self.now - req.sent)
        };
        // As the plugins do: a share of a busy controller's transactions,
        // the load seen when sent and when answered, the limit applied to
        // the slots (a raise by steps).
        if self.ctl.wants_sample() {
            self.ctl.observe(outcome, inflight, &self.slots);
        }
        drop(req.permit);
        self.busy[req.client] = false;
        if req.client < self.clients {
            self.request(req.client);
        }
        self.flush();
    }
}
