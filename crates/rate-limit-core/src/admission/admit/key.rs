//! A new request's decision under its key: the key's bucket, then its
//! slots, then one of its queue places, each taken under the key's lock
//! in the limiter's table.

use std::sync::Arc;

use limits::{BudgetToken, Clock, Nanos, Reservation, Slots, Waiter};

use crate::admission::decision::{Admission, Refused, Wait};
use crate::admission::key_scope::KeyedScope;
use crate::admission::limiter::Limiter;

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
    /// Refused: over the rate, a block started, or a block holds.
    Reject(Refused),
}

impl<W: Waiter, C: Clock> Limiter<W, C> {
    pub(super) fn admit_in_key(
        self: &Arc<Self>,
        scope: &KeyedScope<W>,
        key: u64,
        tag: &[u8],
    ) -> Admission<W, C> {
        let table = &scope.table;
        let now = self.clock.now();
        let peered = scope.peered.is_some();
        let on_response = self.charges_on_response();
        let max_wait = self.max_wait();
        let params = scope.params();
        let block = self.block_length();
        // Read under the key's shard lock, never before it: `reconfigure`
        // stores new values and then visits every shard under its lock, so
        // a key created meanwhile gets the new values or is visited.
        let queue = || scope.queue();
        // The key's bucket, and clones of its slots and queue places, under
        // its shard lock; slots are taken after, as for the rule-wide limiter.
        // `now` also goes to `sticky` during this call's evictions.
        let grabbed = table.with_evicted_at(
            key,
            now,
            |st| {
                let mut taken_place = None;
                if st.blocked(now) {
                    // Refused before the bucket is looked at (block.rs;
                    // `block` commands block keys of any rule).
                    return KeyGrab {
                        rate: KeyRate::Reject(Refused::Blocked),
                        slots: None,
                        place: None,
                    };
                }
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
                        Err(_) => KeyRate::Reject(Refused::Rate),
                    },
                    Some(p) => match p.reserve(st.tat, now, None) {
                        (Reservation::Now, next) => {
                            st.tat = next;
                            KeyRate::Go
                        }
                        (Reservation::Denied(wait), _) if wait <= max_wait => {
                            match st.place(queue()) {
                                None => KeyRate::Reject(Refused::Rate),
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
                                    (Reservation::Denied(_), _) => KeyRate::Reject(Refused::Rate),
                                },
                            }
                        }
                        _ => KeyRate::Reject(Refused::Rate),
                    },
                };
                let rate = match rate {
                    KeyRate::Reject(Refused::Rate) if block > 0 => {
                        let until = now.saturating_add(block);
                        st.block_until(until);
                        if let Some(p) = &scope.peered {
                            // The peers hear of it in the next report.
                            p.block_started(tag, until);
                        }
                        KeyRate::Reject(Refused::BlockStarted)
                    }
                    other => other,
                };
                if peered && st.tat != tat_before {
                    if let Some(p) = params {
                        // A token was taken: one hit for the next report.
                        st.hit(tag, &p);
                    }
                }
                let slots = match rate {
                    KeyRate::Reject(_) => None,
                    _ => scope.limit().map(|l| st.slots(l)),
                };
                KeyGrab {
                    rate,
                    slots,
                    place: taken_place,
                }
            },
            |st| scope.carry(table.shard_index(key), st),
        );
        let Ok(g) = grabbed else {
            return Admission::Reject(Refused::KeyTableFull);
        };
        if let KeyRate::Reject(why) = g.rate {
            // Nothing was taken for this request.
            return Admission::Reject(why);
        }
        // The token taken (if any) becomes a `RateToken` only for a request
        // that waits: admitted requests keep theirs without touching the
        // shared limiter's reference count.
        match g.rate {
            KeyRate::Reject(why) => Admission::Reject(why),
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
