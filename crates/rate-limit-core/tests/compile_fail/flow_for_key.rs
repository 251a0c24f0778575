// A fair flow is not a client key.
use limits::{MonotonicClock, Permit, Waiter};
use rate_limit_core::{FairLimiter, KeyedLimiter, Limits, Shaped};

struct W;
impl Waiter for W {
    fn admit(self, p: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(p)
    }
}

fn flow_of(f: &FairLimiter<W>) -> rate_limit_core::Flow {
    f.flow(b"session")
}

fn main() {
    let limits = Limits { limit: Some(1), rate: None, queue: 0, maxage: None, block: None, auto: None };
    let keyed: KeyedLimiter<W> = KeyedLimiter::new(limits, 16, MonotonicClock);
    let Shaped::Fair(f) = keyed.shaped() else { return };
    let _ = keyed.admit(flow_of(&f), &[]);
}
