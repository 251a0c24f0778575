//! A read-modify-write op the store tests share: a decimal counter.

use store::rmw::{Modify, Put};

/// Adds `by` to a decimal counter (absent = 0) and returns the new value;
/// `by == 0` deletes it.
pub struct Add {
    pub by: u64,
}

impl Modify for Add {
    type Out = u64;
    fn apply(&self, current: Option<&[u8]>) -> (u64, Put) {
        let now: u64 = current
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        if self.by == 0 {
            return (0, Put::Delete);
        }
        let next = now + self.by;
        (
            next,
            Put::Set {
                value: next.to_string().into_bytes(),
                ttl_secs: 60,
            },
        )
    }
}
