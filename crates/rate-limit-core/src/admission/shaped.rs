//! A limiter seen as its shape, decided once when a rule is built: the rule
//! scope ([`RuleLimiter`]), the rule scope with fair flows ([`FairLimiter`])
//! or the keyed scope ([`KeyedLimiter`]). Each handle has the calls that fit
//! its shape and no others, so a key-taking call exists only on the keyed
//! one, and a request's [`Counted`] says in its type whether its number is a
//! client key or a flow.
//!
//! A transaction keeps its [`Counted`] from admission to close and hands it
//! back with its calls through [`Shaped`] (`admit`, `wait_for_slot`,
//! `charge`, `remaining`). Only a handle makes a [`Key`] or a [`Flow`]
//! ([`KeyedLimiter::key`], [`FairLimiter::flow`]), and a rule keeps one
//! shape for its life, so a rule's `Counted` always fits its limiter. One
//! that did not would count against nobody's key or flow: a keyed limiter
//! refuses it (`Refused::KeyMissing`), a fair one counts it in the flow of
//! the empty value, a rule limiter applies the rule's limits as to any
//! request.

use std::sync::Arc;

use limits::{Clock, MonotonicClock, Nanos, Quota, Waiter};

use super::bounds::Limits;
use super::decision::{Admission, SlotWait};
use super::limiter::{Limiter, Scope};

/// A client key (`--key`), hashed by its keyed limiter's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(u64);

/// A fair flow (`--fair`), hashed with its fair limiter's seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow(u64);

impl Key {
    /// The key's hash: how the key table and `top` name it.
    pub fn hash(self) -> u64 {
        self.0
    }
}

/// Whose limits a request counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// The rule's.
    Rule,
    /// Its flow's share of the rule's (`--fair`).
    Flow(Flow),
    /// Its client key's (`--key`).
    Key(Key),
}

impl Counted {
    /// The client key, if counted against one.
    pub fn key(self) -> Option<Key> {
        match self {
            Counted::Key(k) => Some(k),
            Counted::Rule | Counted::Flow(_) => None,
        }
    }

    /// The hash it counts under: the key's, or the flow's (`None`: the
    /// rule's). What the refusal log names a client by.
    pub fn hash(self) -> Option<u64> {
        match self {
            Counted::Rule => None,
            Counted::Flow(Flow(h)) | Counted::Key(Key(h)) => Some(h),
        }
    }
}

/// A limiter of the rule scope without fair flows.
pub struct RuleLimiter<W: Waiter, C: Clock = MonotonicClock>(Arc<Limiter<W, C>>);

/// A limiter of the rule scope whose slots are shared between flows.
pub struct FairLimiter<W: Waiter, C: Clock = MonotonicClock>(Arc<Limiter<W, C>>);

/// A limiter of the keyed scope (peered or not).
pub struct KeyedLimiter<W: Waiter, C: Clock = MonotonicClock>(Arc<Limiter<W, C>>);

// Clones share the limiter (derive would ask `W: Clone`).
macro_rules! handle {
    ($t:ident) => {
        impl<W: Waiter, C: Clock> Clone for $t<W, C> {
            fn clone(&self) -> Self {
                $t(self.0.clone())
            }
        }

        impl<W: Waiter, C: Clock> std::ops::Deref for $t<W, C> {
            type Target = Arc<Limiter<W, C>>;
            /// What every shape has: identity, limits, reports.
            fn deref(&self) -> &Arc<Limiter<W, C>> {
                &self.0
            }
        }
    };
}
handle!(RuleLimiter);
handle!(FairLimiter);
handle!(KeyedLimiter);

/// A limiter as its shape.
pub enum Shaped<W: Waiter, C: Clock = MonotonicClock> {
    Rule(RuleLimiter<W, C>),
    Fair(FairLimiter<W, C>),
    Keyed(KeyedLimiter<W, C>),
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    /// This limiter as its shape (decided once; the shape never changes).
    pub fn shaped(self: &Arc<Self>) -> Shaped<W, C> {
        match &self.scope {
            Scope::Keyed(_) => Shaped::Keyed(KeyedLimiter(self.clone())),
            Scope::Rule(_) if self.fair_stats().is_some() => {
                Shaped::Fair(FairLimiter(self.clone()))
            }
            Scope::Rule(_) => Shaped::Rule(RuleLimiter(self.clone())),
        }
    }
}

impl<W: Waiter, C: Clock> RuleLimiter<W, C> {
    /// A limiter for the whole rule.
    pub fn new(limits: Limits, clock: C) -> Self {
        RuleLimiter(Limiter::new(limits, clock))
    }

    /// Decides a new request: the rate bucket first, then a slot.
    #[inline]
    pub fn admit(&self) -> Admission<W, C> {
        self.0.admit_rule()
    }

    /// After the rate wait of a request that started waiting at `since`.
    #[inline]
    pub fn wait_for_slot(&self, since: Nanos, waiter: W) -> SlotWait<W> {
        self.0.wait_for_slot(since, waiter, None)
    }
}

impl<W: Waiter, C: Clock> FairLimiter<W, C> {
    /// The flow of a request whose flow source gave `bytes` (the same bytes
    /// as the weights file's entries).
    #[inline]
    pub fn flow(&self, bytes: &[u8]) -> Flow {
        Flow(self.0.flow_key(bytes))
    }

    /// Decides a new request of `flow`: the rate bucket first, then a slot
    /// within the flow's share.
    #[inline]
    pub fn admit(&self, flow: Flow) -> Admission<W, C> {
        self.0.admit_flow(flow.0)
    }

    /// After the rate wait of a request of `flow` that started waiting at `since`.
    #[inline]
    pub fn wait_for_slot(&self, since: Nanos, waiter: W, flow: Flow) -> SlotWait<W> {
        self.0.wait_for_slot(since, waiter, Some(flow.0))
    }
}

impl<W: Waiter, C: Clock> KeyedLimiter<W, C> {
    /// A limiter whose limits apply to each key (at most `keys` held at once).
    pub fn new(limits: Limits, keys: usize, clock: C) -> Self {
        KeyedLimiter(Limiter::keyed(limits, keys, clock))
    }

    /// A keyed limiter that joins the peer exchange (see [`Limiter::peered`]).
    pub fn peered(limits: Limits, keys: usize, report_tags: usize, clock: C) -> Self {
        KeyedLimiter(Limiter::peered(limits, keys, report_tags, clock))
    }

    /// The key of a request whose key spec gave `bytes`.
    #[inline]
    pub fn key(&self, bytes: &[u8]) -> Key {
        let table = self.0.keys();
        Key(table.map_or(0, |t| t.hash(bytes)))
    }

    /// Decides a new request of `key`: its bucket first, then its slot. On
    /// a peered limiter `tag` is the key's peer tag (whose hash is the key),
    /// kept with the key for its reports; others ignore it.
    #[inline]
    pub fn admit(&self, key: Key, tag: &[u8]) -> Admission<W, C> {
        self.0.admit_key_tagged(key.0, tag)
    }

    /// After the rate wait of a request of `key` that started waiting at `since`.
    #[inline]
    pub fn wait_for_slot(&self, since: Nanos, waiter: W, key: Key) -> SlotWait<W> {
        self.0.wait_for_slot(since, waiter, Some(key.0))
    }

    /// `--count-status`: charges one token to `key`'s bucket (see
    /// [`Limiter::charge`]).
    #[inline]
    pub fn charge(&self, key: Key) -> bool {
        self.0.charge(Some(key.0))
    }
}

impl<W: Waiter, C: Clock> Shaped<W, C> {
    /// The limiter, for what every shape has (identity, limits, reports).
    pub fn limiter(&self) -> &Arc<Limiter<W, C>> {
        match self {
            Shaped::Rule(RuleLimiter(l))
            | Shaped::Fair(FairLimiter(l))
            | Shaped::Keyed(KeyedLimiter(l)) => l,
        }
    }

    /// The number `who` is for this shape's scope, only where it fits: a
    /// flow on a fair limiter, a key on a keyed one. A `Counted` that does
    /// not fit (made by another limiter) is nobody's: a keyed limiter
    /// refuses it (`Refused::KeyMissing`), a fair one counts it in the flow
    /// of the empty value. A key is never taken for a flow, nor a flow for
    /// a key.
    #[inline]
    fn raw(&self, who: Counted) -> Option<u64> {
        match (self, who) {
            (Shaped::Fair(_), Counted::Flow(Flow(f))) => Some(f),
            (Shaped::Keyed(_), Counted::Key(Key(k))) => Some(k),
            _ => None,
        }
    }

    /// Decides a new request counted as `who` (made by this limiter's
    /// handle). Peered, `tag` is the key's peer tag.
    #[inline]
    pub fn admit(&self, who: Counted, tag: &[u8]) -> Admission<W, C> {
        match (self, who) {
            (Shaped::Rule(l), _) => l.admit(),
            (Shaped::Fair(l), Counted::Flow(f)) => l.admit(f),
            (Shaped::Keyed(l), Counted::Key(k)) => l.admit(k, tag),
            (s, who) => s.limiter().admit_in_scope(s.raw(who), tag),
        }
    }

    /// After the rate wait of a request counted as `who` that started
    /// waiting at `since`: expire it, let it go, or queue it for a slot.
    #[inline]
    pub fn wait_for_slot(&self, since: Nanos, waiter: W, who: Counted) -> SlotWait<W> {
        self.limiter().wait_for_slot(since, waiter, self.raw(who))
    }

    /// `--count-status`: charges one token to the bucket `who` counts
    /// against. False if nothing was charged (see [`Limiter::charge`]).
    #[inline]
    pub fn charge(&self, who: Counted) -> bool {
        self.limiter().charge(self.raw(who))
    }

    /// Slots left, and the rate quota, of what `who` counts against, for
    /// `RateLimit` response fields.
    #[inline]
    pub fn remaining(&self, who: Counted) -> (Option<u32>, Option<Quota>) {
        self.limiter().remaining(self.raw(who))
    }
}
