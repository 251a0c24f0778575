// A rule limiter has no key-taking call: a key cannot reach it.
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{KeyedLimiter, Limits, RuleLimiter};

struct W;
impl Waiter for W {
    fn admit(self, p: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(p)
    }
}

fn main() {
    let limits = Limits { limit: Some(1), rate: None, queue: 0, maxage: None, block: None, auto: None };
    let keyed: KeyedLimiter<W> = KeyedLimiter::new(limits, 16, MonotonicClock);
    let rule: RuleLimiter<W> = RuleLimiter::new(limits, MonotonicClock);
    let key = keyed.key(b"client");
    let _ = rule.admit(key, &[]);
}
