//! Admission decisions of one limiter: a rate bucket, concurrency slots with
//! a FIFO queue, a bounded number of queue places and a maximum wait, for
//! the whole rule or, keyed (`--key`), for each client key.
//!
//! Pure: inputs in, decisions out, time from an injected [`Clock`]. The
//! plugin maps the decisions to hooks and timers; nothing here knows about
//! transactions. Resources given out are guards that give themselves back:
//! a [`Permit`] frees its slot, a [`BudgetToken`] its queue place, and a
//! [`RateToken`] returns its rate token unless the request was served.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use keyed::{KeyState, KeyTable};
use limits::{
    Budget, BudgetToken, Clock, FlowRefused, FlowTry, Gcra, GcraParams, LiveParams, MonotonicClock,
    Nanos, Permit, Quota, Reservation, Slots, Ticket, Waiter,
};

/// What a limiter enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Concurrent holders; `None`: no concurrency limit.
    pub limit: Option<u32>,
    /// Requests per second and burst; `None`: no rate limit.
    pub rate: Option<(f64, u32)>,
    /// Most requests waiting at once (for the rate or a slot).
    pub queue: u32,
    /// Longest wait; `None`: unbounded.
    pub maxage: Option<Nanos>,
}

impl Limits {
    pub fn of(o: &crate::Options) -> Limits {
        Limits {
            limit: o.limit,
            rate: o.rate.map(|r| (r, o.burst)),
            queue: o.queue,
            maxage: o.maxage_nanos(),
        }
    }
}

/// One limiter's state. Shared (`Arc`) by the requests it admits, and by
/// the rules of a group. Its limits can change live ([`Limiter::reconfigure`]).
pub struct Limiter<W: Waiter, C: Clock = MonotonicClock> {
    /// Unique in the process (never reused, unlike an address).
    id: u64,
    /// The limits as last set, for reports; decisions read the atomics below.
    limits: Mutex<Limits>,
    /// Bumped by each [`Limiter::reconfigure`], so readers can cache what
    /// they derive from the limits (a rule's RateLimit-Policy header).
    changes: AtomicU64,
    /// Each key's concurrency limit (keyed; the rule-wide one is in `slots`).
    key_limit: AtomicU32,
    /// Each key's queue places (keyed; the rule-wide ones are in `budget`).
    key_queue: AtomicU32,
    /// `--maxage`; `Nanos::MAX`: unbounded.
    maxage: AtomicU64,
    /// Has a concurrency limit (part of the limiter's shape).
    has_limit: bool,
    slots: Option<Arc<Slots<W>>>,
    bucket: Option<Gcra>,
    budget: Arc<Budget>,
    /// With `--key`: each key's own bucket, slots and queue places.
    keys: Option<KeyTable<Keyed<W>>>,
    /// With `--key`: the keys' slot queues that have had waiters since the
    /// last departure check (by address), so the check visits those, not
    /// every key.
    waiting_queues: Mutex<HashMap<usize, Weak<Slots<W>>>>,
    /// Each key's bucket parameters (keyed).
    params: Option<LiveParams>,
    /// Joins the peer exchange (`--peers`): keys carry their peer tag and
    /// the hits not yet reported (see `peer.rs`).
    peered: bool,
    /// Peered: the unreported hits of keys evicted since the last report,
    /// per shard of `keys` (bounded, see `dthrottle::evicted`).
    evicted_hits: dthrottle::ShardedEvictedHits,
    /// With `--fair`: hashes flow keys (secret per limiter, so clients
    /// cannot aim at one another's flows; see `fair.rs`).
    flow_seed: std::hash::RandomState,
    /// `--count-status`: the rate is only checked at admission and charged
    /// by responses ([`Limiter::charge`], see `charge.rs`). Part of the
    /// limiter's shape: set once, before it decides anything.
    on_response: AtomicBool,
    clock: C,
}

/// One key's limits: its bucket's TAT, and (boxed, allocated the first time
/// the key needs them) its slots and queue places. 16 bytes inline.
pub struct Keyed<W: Waiter> {
    tat: Nanos,
    queues: Option<Box<KeyQueues<W>>>,
}

struct KeyQueues<W: Waiter> {
    slots: Option<Arc<Slots<W>>>,
    budget: Option<Arc<Budget>>,
    /// Peered limiters only: the key's tag and unreported hits.
    peer: Option<PeerKey>,
    /// `--count-status`: until when charges keep the key refused (0: never
    /// locked out). Forgetting it would hand the client a fresh burst.
    locked_until: Nanos,
}

impl<W: Waiter> Default for Keyed<W> {
    fn default() -> Self {
        Keyed {
            tat: 0,
            queues: None,
        }
    }
}

impl<W: Waiter> Keyed<W> {
    fn queues(&mut self) -> &mut KeyQueues<W> {
        self.queues.get_or_insert_with(|| {
            Box::new(KeyQueues {
                slots: None,
                budget: None,
                peer: None,
                locked_until: 0,
            })
        })
    }

    fn slots(&mut self, limit: u32) -> Arc<Slots<W>> {
        self.queues()
            .slots
            .get_or_insert_with(|| Slots::new(limit))
            .clone()
    }

    /// A queue place of this key; none (and nothing allocated) with `--queue=0`.
    fn place(&mut self, queue: u32) -> Option<BudgetToken> {
        if queue == 0 {
            return None;
        }
        self.queues()
            .budget
            .get_or_insert_with(|| Budget::new(queue))
            .try_take()
    }
}

impl<W: Waiter> KeyState for Keyed<W> {
    /// Holds slots or waiters, or a request is between deciding and taking
    /// them (it holds a clone, taken under the key's lock): forgetting the
    /// key would lose them.
    fn busy(&self) -> bool {
        self.queues.as_ref().is_some_and(|q| {
            q.slots
                .as_ref()
                .is_some_and(|s| Arc::strong_count(s) > 1 || s.waiting() > 0)
                || q.budget.as_ref().is_some_and(|b| Arc::strong_count(b) > 1)
        })
    }

    /// Peered, in debt, or locked out by `--count-status` charges: kept
    /// while an idle key can go instead (a peered key's unreported hits do
    /// not keep it: they are carried, see `peer.rs`).
    fn sticky(&self) -> bool {
        self.queues.as_ref().is_some_and(|q| {
            q.peer.as_ref().is_some_and(PeerKey::sticky) || q.locked_until > peer::now()
        })
    }
}

/// The per-key resources a decision works with, taken under the key's lock.
struct KeyGrab<W: Waiter> {
    rate: KeyRate,
    slots: Option<Arc<Slots<W>>>,
    place: Option<BudgetToken>,
}

enum KeyRate {
    /// No rate limit, or a token was taken now.
    Go,
    Wait(Nanos),
    Reject,
}

/// What a limiter holds right now (for `show`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Slots held.
    pub active: u64,
    /// Requests waiting (for the rate or a slot).
    pub waiting: u64,
    /// Keys held (keyed).
    pub keys: Option<u64>,
    /// Keys evicted so far (keyed).
    pub evicted: Option<u64>,
}

/// One key's state (for `top`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyUsage {
    pub key: u64,
    pub active: u32,
    pub waiting: u32,
    /// How far the key's bucket is past empty: the wait a request would
    /// have now (0: it conforms).
    pub over_rate: Nanos,
}

/// A [`KeyUsage`] ordered for `top`: more slots and waiters first, then
/// further over the rate, then the smaller key (so the order is total).
#[derive(PartialEq, Eq)]
struct Ranked(KeyUsage);

impl Ranked {
    fn rank(&self) -> (u64, Nanos, Reverse<u64>) {
        let k = &self.0;
        (
            u64::from(k.active) + u64::from(k.waiting),
            k.over_rate,
            Reverse(k.key),
        )
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// The decision for a new request.
pub enum Admission<W: Waiter, C: Clock = MonotonicClock> {
    /// Go on now, holding a slot if the limiter has a concurrency limit.
    Go(Option<Permit<W>>),
    /// Wait: first `rate_delay` for the rate bucket, then for a slot.
    Wait(Wait<W, C>),
    /// Refused at once (over the rate or the limit, and no queue place or
    /// not within `maxage`). Nothing was taken.
    Reject(Refused),
}

/// Why [`Admission::Reject`] refused (for the refusal log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over the rate, and it could not wait for it (no queue place, or the
    /// wait would pass `maxage`).
    Rate,
    /// At the concurrency limit and no queue place left.
    QueueFull,
    /// Keyed: every key held is busy, so the client's key has no state.
    KeyTableFull,
    /// `--fair --flow-over=reject`: its flow holds its share.
    FlowOver,
    /// Keyed, and the request has no key (the plugin applies
    /// `--key-missing` before asking, so it never sees this).
    KeyMissing,
}

/// A decided wait: its queue place, when it started, and the rate token it
/// reserved (given back if the request is not served).
pub struct Wait<W: Waiter, C: Clock = MonotonicClock> {
    pub place: BudgetToken,
    pub since: Nanos,
    pub rate_delay: Nanos,
    pub rate: Option<RateToken<W, C>>,
}

/// A rate token taken for a request that has not been served yet. Dropping
/// it gives the token back; [`RateToken::spend`] keeps it taken.
#[must_use = "dropping the token gives it back to the bucket"]
pub struct RateToken<W: Waiter, C: Clock = MonotonicClock> {
    limiter: Option<Arc<Limiter<W, C>>>,
    key: Option<u64>,
}

impl<W: Waiter, C: Clock> RateToken<W, C> {
    /// The request was served: the token stays taken.
    pub fn spend(mut self) {
        self.limiter = None;
    }
}

impl<W: Waiter, C: Clock> Drop for RateToken<W, C> {
    fn drop(&mut self) {
        if let Some(l) = self.limiter.take() {
            l.refund_rate(self.key);
        }
    }
}

/// What happens to a request once its rate wait is over.
pub enum SlotWait<W: Waiter> {
    /// No concurrency limit: go on.
    Go(W),
    /// Already waited `maxage`: refuse it.
    Expired(W),
    /// Refused as it joins its flow's queue (fair limiter): the flow is at
    /// its share with `--flow-over=reject` (counted in `flow_rejected`), or
    /// already has its part of the queue places waiting (a queue-full
    /// refusal). Its rate token and place are given back with the request.
    Refused(W),
    /// In the FIFO, or already admitted inside the call (then the ticket is
    /// no longer waiting). `expires_in`: time left until `maxage`.
    Queued {
        ticket: Ticket<W>,
        expires_in: Option<Nanos>,
    },
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// A limiter for the whole rule.
    pub fn new(limits: Limits, clock: C) -> Arc<Self> {
        Arc::new(Limiter {
            slots: limits.limit.map(Slots::new),
            bucket: limits.rate.map(|(r, b)| Gcra::per_second(r, b)),
            budget: Budget::new(limits.queue),
            keys: None,
            params: None,
            ..Limiter::base(limits, clock)
        })
    }

    /// A limiter whose limits apply to each key (at most `keys` held at once).
    pub fn keyed(limits: Limits, keys: usize, clock: C) -> Arc<Self> {
        Arc::new(Limiter {
            slots: None,
            bucket: None,
            budget: Budget::new(0),
            keys: Some(KeyTable::new(keys)),
            params: limits
                .rate
                .map(|(r, b)| LiveParams::new(GcraParams::per_second(r, b))),
            ..Limiter::base(limits, clock)
        })
    }

    fn base(limits: Limits, clock: C) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Limiter {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limits: Mutex::new(limits),
            changes: AtomicU64::new(0),
            key_limit: AtomicU32::new(limits.limit.unwrap_or(u32::MAX)),
            key_queue: AtomicU32::new(limits.queue),
            maxage: AtomicU64::new(limits.maxage.unwrap_or(Nanos::MAX)),
            has_limit: limits.limit.is_some(),
            slots: None,
            bucket: None,
            budget: Budget::new(0),
            keys: None,
            waiting_queues: Mutex::new(HashMap::new()),
            params: None,
            peered: false,
            evicted_hits: dthrottle::ShardedEvictedHits::new(0, 1),
            flow_seed: std::hash::RandomState::new(),
            on_response: AtomicBool::new(false),
            clock,
        }
    }

    /// What the limiter holds now. Keyed, this visits every key (under
    /// each shard's lock in turn): run it off request paths.
    pub fn usage(&self) -> Usage {
        match &self.keys {
            None => Usage {
                active: self.slots.as_ref().map_or(0, |s| u64::from(s.active())),
                waiting: u64::from(self.budget.used()),
                keys: None,
                evicted: None,
            },
            Some(t) => {
                let mut u = Usage {
                    keys: Some(t.len() as u64),
                    evicted: Some(t.evicted()),
                    ..Usage::default()
                };
                t.for_each(|_, st| {
                    if let Some(q) = &st.queues {
                        if let Some(s) = &q.slots {
                            u.active += u64::from(s.active());
                        }
                        if let Some(b) = &q.budget {
                            u.waiting += u64::from(b.used());
                        }
                    }
                });
                u
            }
        }
    }

    /// The `n` keys holding the most slots and waiters, then furthest over
    /// their rate (keyed; empty otherwise), ties by key. Visits every key, one
    /// shard's lock at a time (off request paths), and keeps only the best
    /// `n` in a heap: memory is O(n) however many keys there are.
    pub fn top(&self, n: usize) -> Vec<KeyUsage> {
        let Some(t) = &self.keys else {
            return Vec::new();
        };
        if n == 0 {
            return Vec::new();
        }
        let now = self.clock.now();
        let params = self.key_params();
        // A min-heap (by rank) of the best n so far: its root is the weakest.
        let mut best: BinaryHeap<Reverse<Ranked>> = BinaryHeap::with_capacity(n + 1);
        t.for_each(|key, st| {
            let (active, waiting) = st.queues.as_ref().map_or((0, 0), |q| {
                (
                    q.slots.as_ref().map_or(0, |s| s.active()),
                    q.budget.as_ref().map_or(0, |b| b.used()),
                )
            });
            let over_rate = params.map_or(0, |p| p.reserve(st.tat, now, None).0.wait());
            if active + waiting == 0 && over_rate == 0 {
                return;
            }
            let k = Ranked(KeyUsage {
                key,
                active,
                waiting,
                over_rate,
            });
            if best.len() < n {
                best.push(Reverse(k));
            } else if best.peek().is_some_and(|Reverse(weakest)| k > *weakest) {
                best.pop();
                best.push(Reverse(k));
            }
        });
        // Ascending Reverse = descending rank: the strongest first.
        best.into_sorted_vec()
            .into_iter()
            .map(|Reverse(r)| r.0)
            .collect()
    }

    /// Unique among the limiters of this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        *self.limits.lock()
    }

    /// How many times the limits were changed: a value derived from
    /// [`Limiter::limits`] is current while this has not moved.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Changes the limits of the live limiter: slots held, waiters, queue
    /// places and buckets carry over. A raised limit admits waiters at once
    /// (inside this call: their `admit` runs here). A lowered one preempts
    /// nobody; a changed rate keeps each bucket's level (as time).
    ///
    /// Whether there is a concurrency limit and whether there is a rate is
    /// the limiter's shape: changing either is refused with the option's
    /// name, and the caller builds a new limiter.
    pub fn reconfigure(&self, new: Limits) -> Result<(), &'static str> {
        let mut cur = self.limits.lock();
        if cur.limit.is_some() != new.limit.is_some() {
            return Err("--limit");
        }
        if cur.rate.is_some() != new.rate.is_some() {
            return Err("--rate");
        }
        *cur = new;
        self.changes.fetch_add(1, Ordering::Release);
        drop(cur);
        self.maxage
            .store(new.maxage.unwrap_or(Nanos::MAX), Ordering::Relaxed);
        let params = new.rate.map(|(r, b)| GcraParams::per_second(r, b));
        if let (Some(b), Some(p)) = (&self.bucket, params) {
            b.set_params(p);
        }
        if let (Some(live), Some(p)) = (&self.params, params) {
            live.set(p);
        }
        self.budget.set_max(new.queue);
        self.key_queue.store(new.queue, Ordering::Relaxed);
        let limit = new.limit.unwrap_or(u32::MAX);
        self.key_limit.store(limit, Ordering::Relaxed);
        if let Some(s) = &self.slots {
            s.set_flow_queue(new.queue);
            s.set_limit(limit);
        }
        if let Some(t) = &self.keys {
            // Clones first: raising a limit admits waiters, which must not
            // run under the table's locks.
            let mut held = Vec::new();
            t.for_each(|_, st| {
                if let Some(q) = &st.queues {
                    held.push((q.slots.clone(), q.budget.clone()));
                }
            });
            for (slots, budget) in held {
                if let Some(b) = budget {
                    b.set_max(new.queue);
                }
                if let Some(s) = slots {
                    s.set_limit(limit);
                }
            }
        }
        Ok(())
    }

    /// Each key's concurrency limit; `None`: not keyed, or no concurrency limit.
    fn key_limit(&self) -> Option<u32> {
        self.keys.as_ref()?;
        self.has_limit
            .then(|| self.key_limit.load(Ordering::Relaxed))
    }

    fn max_wait(&self) -> Nanos {
        self.maxage.load(Ordering::Relaxed)
    }

    fn key_params(&self) -> Option<GcraParams> {
        self.params.as_ref().map(LiveParams::get)
    }

    /// The keyed table (with `--key`), for hashing keys and for its counters.
    pub fn keys(&self) -> Option<&KeyTable<Keyed<W>>> {
        self.keys.as_ref()
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The rule-wide slots (not keyed).
    pub fn slots(&self) -> Option<&Arc<Slots<W>>> {
        self.slots.as_ref()
    }

    /// Requests waiting right now for the rule-wide limits (for the rate or
    /// a slot); keyed waits are counted per key.
    pub fn queued(&self) -> u32 {
        self.budget.used()
    }

    /// Slots left, and the rate quota, of the rule or of `key`, for
    /// `RateLimit` response fields.
    pub fn remaining(&self, key: Option<u64>) -> (Option<u32>, Option<Quota>) {
        let now = self.clock.now();
        let left = |s: &Arc<Slots<W>>| s.limit().saturating_sub(s.active());
        let (limit, params) = (self.key_limit(), self.key_params());
        match (&self.keys, key) {
            (Some(t), Some(k)) => t
                .get(k, |st| {
                    let held = st.queues.as_ref().and_then(|q| q.slots.as_ref());
                    let slots = limit.map(|l| held.map_or(l, left));
                    let quota = params.map(|p| p.quota(st.tat, now));
                    (slots, quota)
                })
                .unwrap_or((limit, params.map(|p| p.quota(0, now)))),
            _ => (
                self.slots.as_ref().map(left),
                self.bucket.as_ref().map(|b| b.quota(now)),
            ),
        }
    }

    fn refund_rate(&self, key: Option<u64>) {
        if self.charges_on_response() {
            // Checked, not taken: nothing to give back.
            return;
        }
        let now = self.clock.now();
        match (&self.keys, self.key_params(), key) {
            (Some(t), Some(p), Some(k)) => {
                // A key evicted meanwhile was reset to full: nothing to give back.
                let _ = t.get(k, |st| {
                    st.tat = p.refund(st.tat, now);
                    st.unhit();
                });
            }
            _ => {
                if let Some(b) = &self.bucket {
                    b.refund(now);
                }
            }
        }
    }

    fn rate_token(self: &Arc<Self>, key: Option<u64>) -> Option<RateToken<W, C>> {
        let rated = (self.params.is_some() || self.bucket.is_some()) && !self.charges_on_response();
        rated.then(|| RateToken {
            limiter: Some(self.clone()),
            key,
        })
    }

    /// Decides a new request: the rate bucket first, then a slot. `key`
    /// (with `--key`) selects the client's own limits; a keyed limiter
    /// refuses a request without one, and refuses when every key it holds
    /// is busy (the table is full of keys holding slots or waiters).
    pub fn admit(self: &Arc<Self>, key: Option<u64>) -> Admission<W, C> {
        self.admit_tagged(key, &[])
    }

    /// [`admit`](Self::admit) for a peered limiter: `tag` is the key's peer
    /// tag (whose hash is `key`), kept with the key for its reports. Other
    /// limiters ignore it.
    pub fn admit_tagged(self: &Arc<Self>, key: Option<u64>, tag: &[u8]) -> Admission<W, C> {
        match (&self.keys, key) {
            (None, flow) => self.admit_rule(flow),
            (Some(t), Some(k)) => self.admit_key(t, k, tag),
            (Some(_), None) => Admission::Reject(Refused::KeyMissing),
        }
    }

    fn admit_key(
        self: &Arc<Self>,
        table: &KeyTable<Keyed<W>>,
        key: u64,
        tag: &[u8],
    ) -> Admission<W, C> {
        let now = self.clock.now();
        let peered = self.peered;
        let on_response = self.charges_on_response();
        if peered || on_response {
            // For `sticky` during this call's evictions.
            peer::set_now(now);
        }
        let max_wait = self.max_wait();
        let params = self.key_params();
        // Read under the key's shard lock, never before it: `reconfigure`
        // stores new values and then visits every shard under its lock, so
        // a key created meanwhile gets the new values or is visited.
        let queue = || self.key_queue.load(Ordering::Relaxed);
        // The key's bucket, and clones of its slots and queue places, under
        // its shard lock; slots are taken after, as for the rule-wide limiter.
        let grabbed = table.with_evicted(
            key,
            |st| {
                let mut taken_place = None;
                let tat_before = st.tat;
                let rate = match params {
                    None => KeyRate::Go,
                    // Checked only; the response charges it (no rate wait).
                    Some(p) if on_response => match p.check(st.tat, now) {
                        Ok(()) => {
                            if peered {
                                // The charge reports under the key's tag.
                                st.note_tag(tag, &p);
                            }
                            KeyRate::Go
                        }
                        Err(_) => KeyRate::Reject,
                    },
                    Some(p) => match p.reserve(st.tat, now, None) {
                        (Reservation::Now, next) => {
                            st.tat = next;
                            KeyRate::Go
                        }
                        (Reservation::Denied(wait), _) if wait <= max_wait => {
                            match st.place(queue()) {
                                None => KeyRate::Reject,
                                Some(token) => match p.reserve(st.tat, now, Some(max_wait)) {
                                    (Reservation::Now, next) => {
                                        st.tat = next;
                                        taken_place = Some(token);
                                        KeyRate::Go
                                    }
                                    (Reservation::After(d), next) => {
                                        st.tat = next;
                                        taken_place = Some(token);
                                        KeyRate::Wait(d)
                                    }
                                    (Reservation::Denied(_), _) => KeyRate::Reject,
                                },
                            }
                        }
                        _ => KeyRate::Reject,
                    },
                };
                if peered && st.tat != tat_before {
                    if let Some(p) = params {
                        // A token was taken: one hit for the next report.
                        st.hit(tag, &p);
                    }
                }
                let slots = match rate {
                    KeyRate::Reject => None,
                    _ => self.key_limit().map(|l| st.slots(l)),
                };
                KeyGrab {
                    rate,
                    slots,
                    place: taken_place,
                }
            },
            |st| self.carry(table.shard_index(key), st),
        );
        let Ok(g) = grabbed else {
            return Admission::Reject(Refused::KeyTableFull);
        };
        if matches!(g.rate, KeyRate::Reject) {
            // Nothing was taken for this request.
            return Admission::Reject(Refused::Rate);
        }
        // The token taken (if any) becomes a `RateToken` only for a request
        // that waits: admitted requests keep theirs without touching the
        // shared limiter's reference count.
        match g.rate {
            KeyRate::Reject => Admission::Reject(Refused::Rate),
            KeyRate::Wait(delay) => match g.place {
                Some(place) => Admission::Wait(Wait {
                    place,
                    since: now,
                    rate_delay: delay,
                    rate: self.rate_token(Some(key)),
                }),
                None => {
                    self.refund_rate(Some(key));
                    Admission::Reject(Refused::Rate)
                }
            },
            KeyRate::Go => {
                let Some(slots) = g.slots else {
                    return Admission::Go(None);
                };
                if let Some(permit) = slots.try_acquire() {
                    return Admission::Go(Some(permit));
                }
                let place = g
                    .place
                    .or_else(|| table.get(key, |st| st.place(queue())).flatten());
                match place {
                    Some(place) => Admission::Wait(Wait {
                        place,
                        since: now,
                        rate_delay: 0,
                        rate: self.rate_token(Some(key)),
                    }),
                    None => {
                        // Nothing taken after all: the key's token goes back.
                        self.refund_rate(Some(key));
                        Admission::Reject(Refused::QueueFull)
                    }
                }
            }
        }
    }

    /// `flow`: the request's flow on a fair limiter (`--fair`), else ignored.
    fn admit_rule(self: &Arc<Self>, flow: Option<u64>) -> Admission<W, C> {
        // The clock is read only when needed: a slot-only admission has no use for it.
        let mut now = None;
        let mut place = None;
        if let Some(bucket) = &self.bucket {
            let now = *now.insert(self.clock.now());
            if self.charges_on_response() {
                // Checked only; the response charges it (no rate wait).
                if bucket.check(now).is_err() {
                    return Admission::Reject(Refused::Rate);
                }
            } else if let Reservation::Denied(wait) = bucket.reserve(now, None) {
                // Over the rate: wait if a queue place is free and maxage allows the wait.
                let max_wait = self.max_wait();
                if wait > max_wait {
                    return Admission::Reject(Refused::Rate);
                }
                let Some(p) = self.budget.try_take() else {
                    return Admission::Reject(Refused::Rate);
                };
                match bucket.reserve(now, Some(max_wait)) {
                    Reservation::Now => place = Some(p),
                    Reservation::After(delay) => {
                        return Admission::Wait(Wait {
                            place: p,
                            since: now,
                            rate_delay: delay,
                            rate: self.rate_token(None),
                        });
                    }
                    Reservation::Denied(_) => return Admission::Reject(Refused::Rate),
                }
            }
        }
        // From here a rate token (if any) is taken for this request; it
        // becomes a `RateToken` only if the request waits.
        let Some(slots) = &self.slots else {
            return Admission::Go(None);
        };
        if slots.is_fair() {
            match slots.try_acquire_flow(flow.unwrap_or(0)) {
                FlowTry::Go(permit) => return Admission::Go(Some(permit)),
                FlowTry::Over => {
                    // Refused at once: the token goes back (and the place).
                    self.refund_rate(None);
                    return Admission::Reject(Refused::FlowOver);
                }
                FlowTry::Wait => {}
            }
        } else if let Some(permit) = slots.try_acquire() {
            return Admission::Go(Some(permit));
        }
        match place.or_else(|| self.budget.try_take()) {
            Some(place) => Admission::Wait(Wait {
                place,
                since: now.unwrap_or_else(|| self.clock.now()),
                rate_delay: 0,
                rate: self.rate_token(None),
            }),
            None => {
                // Nothing taken after all: the token goes back.
                self.refund_rate(None);
                Admission::Reject(Refused::QueueFull)
            }
        }
    }

    /// After the rate wait of a request that started waiting at `since`:
    /// expire it, let it go, or queue it for a slot (of its key, if keyed).
    pub fn wait_for_slot(&self, since: Nanos, waiter: W, key: Option<u64>) -> SlotWait<W> {
        let slots = match (&self.keys, key, self.key_limit()) {
            (Some(_), _, None) => None,
            (Some(t), Some(k), Some(l)) => {
                // The limit is read again under the shard lock (see admit_key).
                let s = t.with(k, |st| st.slots(self.key_limit().unwrap_or(l)));
                match s {
                    Ok(s) => Some(s),
                    // Cannot happen while the waiter's queue place pins the
                    // key; if it does, refuse rather than wait unlimited.
                    Err(_) => return SlotWait::Expired(waiter),
                }
            }
            _ => self.slots.clone(),
        };
        let Some(slots) = slots else {
            return SlotWait::Go(waiter);
        };
        let now = self.clock.now();
        let deadline = Some(self.max_wait())
            .filter(|&m| m != Nanos::MAX)
            .map(|m| since.saturating_add(m));
        if deadline.is_some_and(|d| d <= now) {
            return SlotWait::Expired(waiter);
        }
        let ticket = match key {
            // A fair limiter's key is the flow; its share (after a rate
            // wait, it was not checked) and queue part are checked as it joins.
            Some(flow) if self.keys.is_none() && slots.is_fair() => {
                match slots.try_enqueue_flow(flow, waiter) {
                    Ok(t) => t,
                    Err(FlowRefused::Over(w) | FlowRefused::Full(w)) => {
                        return SlotWait::Refused(w)
                    }
                }
            }
            _ => slots.enqueue(waiter),
        };
        if self.keys.is_some() && ticket.is_waiting() {
            // After the enqueue: a departure check that finds this queue
            // empty and drops it from the list does so under the list's
            // lock, before or after this insert, never between.
            self.waiting_queues
                .lock()
                .insert(Arc::as_ptr(&slots) as usize, Arc::downgrade(&slots));
        }
        SlotWait::Queued {
            ticket,
            expires_in: deadline.map(|d| d - now),
        }
    }

    /// Takes out of the queues the first `max` waiters (oldest first, per
    /// queue) for which `gone` is true: clients that left. `gone` may be
    /// slow. Also returns how many waiters remain.
    pub fn remove_departed(&self, max: usize, mut gone: impl FnMut(&W) -> bool) -> (Vec<W>, u32) {
        let queues: Vec<Arc<Slots<W>>> = match &self.keys {
            None => self.slots.iter().cloned().collect(),
            Some(_) => {
                let mut list = self.waiting_queues.lock();
                let mut live = Vec::new();
                list.retain(|_, weak| match weak.upgrade() {
                    Some(s) if s.waiting() > 0 => {
                        live.push(s);
                        true
                    }
                    _ => false,
                });
                live
            }
        };
        let mut checked = 0;
        let mut out = Vec::new();
        let mut left = 0u32;
        for slots in queues {
            out.extend(slots.remove_waiting(|w| {
                checked += 1;
                checked <= max && gone(w)
            }));
            left = left.saturating_add(slots.waiting());
        }
        (out, left)
    }
}

mod charge;
mod fair;
mod peer;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod top_tests;

use peer::PeerKey;
pub use peer::MAX_PEER_DEBT;
