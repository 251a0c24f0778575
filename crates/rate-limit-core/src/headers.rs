//! IETF `RateLimit-Policy` / `RateLimit` field values
//! (draft-ietf-httpapi-ratelimit-headers-10, structured-field lists).
//!
//! - A concurrency limit is a `concurrent-requests` quota:
//!   `"concurrency";q=100;qu="concurrent-requests"` / `"concurrency";r=37`.
//! - A rate is a request quota over a whole-second window. A GCRA bucket
//!   (rate r, burst b) has no exact window, so the policy states what the
//!   long-run rate allows over `w = max(1, ceil(b / r))` seconds:
//!   `q = ceil(r·w)` (never less than b). `r` is the bucket's remaining
//!   burst; `t` is whole seconds until more quota is available.

use limits::{Quota, NANOS_PER_SEC};

mod policy;
pub use policy::Policy;

/// The `RateLimit-Policy` value for a rule, computed once.
pub fn policy(limit: Option<u32>, rate: Option<(f64, u32)>) -> Option<String> {
    let mut items = Vec::new();
    if let Some(l) = limit {
        items.push(format!("\"concurrency\";q={l};qu=\"concurrent-requests\""));
    }
    if let Some((r, b)) = rate {
        let (q, w) = rate_window(r, b);
        items.push(format!("\"rate\";q={q};w={w}"));
    }
    (!items.is_empty()).then(|| items.join(", "))
}

fn rate_window(rate: f64, burst: u32) -> (u64, u64) {
    let w = (f64::from(burst) / rate).ceil().max(1.0) as u64;
    let q = ((rate * w as f64).ceil() as u64).max(u64::from(burst));
    (q, w)
}

/// The `RateLimit` value: remaining concurrency (`limit - active`) and/or rate quota.
pub fn remaining(concurrency_left: Option<u32>, rate: Option<Quota>) -> Option<String> {
    let mut items = Vec::new();
    if let Some(left) = concurrency_left {
        items.push(format!("\"concurrency\";r={left}"));
    }
    if let Some(q) = rate {
        let t = q.replenish_in.div_ceil(NANOS_PER_SEC);
        items.push(format!("\"rate\";r={};t={t}", q.remaining));
    }
    (!items.is_empty()).then(|| items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        assert_eq!(
            policy(Some(100), None).as_deref(),
            Some("\"concurrency\";q=100;qu=\"concurrent-requests\"")
        );
        assert_eq!(
            policy(None, Some((10.0, 10))).as_deref(),
            Some("\"rate\";q=10;w=1")
        );
        assert_eq!(
            policy(None, Some((100.0, 1))).as_deref(),
            Some("\"rate\";q=100;w=1")
        );
        assert_eq!(
            policy(None, Some((0.5, 1))).as_deref(),
            Some("\"rate\";q=1;w=2")
        );
        assert_eq!(
            policy(None, Some((10.0, 50))).as_deref(),
            Some("\"rate\";q=50;w=5")
        );
        assert_eq!(
            policy(Some(2), Some((1.0, 1))).as_deref(),
            Some("\"concurrency\";q=2;qu=\"concurrent-requests\", \"rate\";q=1;w=1")
        );
        assert_eq!(policy(None, None), None);
    }

    #[test]
    fn remaining_values() {
        let q = Quota {
            remaining: 9,
            replenish_in: NANOS_PER_SEC / 10,
        };
        assert_eq!(
            remaining(Some(37), Some(q)).as_deref(),
            Some("\"concurrency\";r=37, \"rate\";r=9;t=1")
        );
        let full = Quota {
            remaining: 10,
            replenish_in: 0,
        };
        assert_eq!(
            remaining(None, Some(full)).as_deref(),
            Some("\"rate\";r=10;t=0")
        );
    }
}
