//! The keyed scope (`--key`): each key's own bucket, slots and queue
//! places, held in the limiter's [`KeyTable`], and the admission of a
//! request under its key.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use keyed::{KeyState, KeyTable};
use limits::{Budget, BudgetToken, Clock, Nanos, Reservation, Slots, Waiter};

use super::{Admission, KeyQueues, Keyed, Limiter, Refused, Wait};

impl<W: Waiter> Default for Keyed<W> {
    fn default() -> Self {
        Keyed {
            tat: 0,
            queues: None,
        }
    }
}

impl<W: Waiter> Keyed<W> {
    pub(super) fn queues(&mut self) -> &mut KeyQueues<W> {
        self.queues.get_or_insert_with(|| {
            Box::new(KeyQueues {
                slots: None,
                budget: None,
                peer: None,
                locked_until: 0,
            })
        })
    }

    pub(super) fn slots(&mut self, limit: u32) -> Arc<Slots<W>> {
        self.queues()
            .slots
            .get_or_insert_with(|| Slots::new(limit))
            .clone()
    }

    /// A queue place of this key; none (and nothing allocated) with `--queue=0`.
    pub(super) fn place(&mut self, queue: u32) -> Option<BudgetToken> {
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
    const USES_TIME: bool = true;

    /// Holds slots or waiters, or a request is between deciding and taking
    /// them (it holds a clone, taken under the key's lock): forgetting the
    /// key would lose them.
    fn busy(&self, _now: Nanos) -> bool {
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
    fn sticky(&self, now: Nanos) -> bool {
        self.queues
            .as_ref()
            .is_some_and(|q| q.peer.as_ref().is_some_and(|p| p.sticky(now)) || q.locked_until > now)
    }
}

/// The per-key resources a decision works with, taken under the key's lock.
pub(super) struct KeyGrab<W: Waiter> {
    rate: KeyRate,
    slots: Option<Arc<Slots<W>>>,
    place: Option<BudgetToken>,
}

pub(super) enum KeyRate {
    /// No rate limit, or a token was taken now.
    Go,
    Wait(Nanos),
    Reject,
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    pub(super) fn admit_key(
        self: &Arc<Self>,
        table: &KeyTable<Keyed<W>>,
        key: u64,
        tag: &[u8],
    ) -> Admission<W, C> {
        let now = self.clock.now();
        let peered = self.peered;
        let on_response = self.charges_on_response();
        let max_wait = self.max_wait();
        let params = self.key_params();
        // Read under the key's shard lock, never before it: `reconfigure`
        // stores new values and then visits every shard under its lock, so
        // a key created meanwhile gets the new values or is visited.
        let queue = || self.key_queue.load(Ordering::Relaxed);
        // The key's bucket, and clones of its slots and queue places, under
        // its shard lock; slots are taken after, as for the rule-wide limiter.
        // `now` also goes to `sticky` during this call's evictions.
        let grabbed = table.with_evicted_at(
            key,
            now,
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
}
