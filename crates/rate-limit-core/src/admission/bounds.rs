//! [`Limits`]: what a limiter enforces. A leaf: each scope's state is built
//! from it, and the limiter keeps the last set for reports.

use limits::Nanos;

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
    /// `--block`: how long a key (or the rule) refused for its rate stays
    /// refused; `None`: no block.
    pub block: Option<Nanos>,
    /// `--limit=auto`: `limit` is learned within these bounds (part of the
    /// limiter's shape).
    pub auto: Option<crate::options::AutoLimit>,
}

impl Limits {
    pub fn of(o: &crate::options::Options) -> Limits {
        Limits {
            limit: o.limit,
            rate: o.rate.map(|r| (r, o.burst)),
            queue: o.queue,
            maxage: o.maxage_nanos(),
            block: o.block_nanos(),
            auto: o.auto,
        }
    }
}
