//! The `RateLimit-Policy` header of a `--ratelimit-headers` rule, following
//! live changes (`traffic_ctl plugin msg rate_limit set`).
//!
//! The value is cached with the limiter's change count it was made at; only
//! a response that carries the header reads it, and it is rebuilt only after
//! the limiter's limits changed (a live `set` or a reload). Reading it is an
//! `ArcSwap` load (no write to a line shared by all threads, unlike a lock).

use std::sync::Arc;

use arc_swap::ArcSwap;
use limits::{Clock, Waiter};

use crate::{headers, Limiter, Limits};

pub struct Policy {
    /// `(Limiter::changes() when made, the value)`. A limit or a rate
    /// cannot be added or removed live, so there is always a value.
    cache: ArcSwap<(u64, String)>,
}

/// A learned limit (`--limit=auto`) moves every window: it is not
/// announced (nor its slots left, `remaining`), only the rate is.
fn value(l: &Limits) -> Option<String> {
    headers::policy(l.limit.filter(|_| l.auto.is_none()), l.rate)
}

impl Policy {
    /// For a rule with `limits`, its limiter at change count `changes`;
    /// `None` without a limit and a rate (nothing to announce).
    pub fn new(limits: &Limits, changes: u64) -> Option<Policy> {
        Some(Policy {
            cache: ArcSwap::from_pointee((changes, value(limits)?)),
        })
    }

    /// Calls `f` with the header's current value (if any).
    pub fn with<W: Waiter, C: Clock>(&self, limiter: &Limiter<W, C>, f: impl FnOnce(&str)) {
        let now = limiter.changes();
        {
            let c = self.cache.load();
            if c.0 == now {
                return f(&c.1);
            }
        }
        // Changed: rebuilt from the limiter. Racing rebuilds may store out
        // of order; a value is used only at its own change count.
        let Some(fresh) = value(&limiter.limits()) else {
            return;
        };
        f(&fresh);
        self.cache.store(Arc::new((now, fresh)));
    }
}
