//! `--store-sync`'s arithmetic: from each period's total over all proxies
//! (Redis's answer to a key's sync), the hits of the *other* proxies, each
//! period applied once. Bounded: past [`MAX_REMEMBERED`] keys, those not
//! synced in the last two periods are forgotten.

use std::collections::HashMap;

/// Most keys exchanged per period; the heaviest first.
pub const MAX_KEYS_PER_SYNC: usize = 4096;
/// Most keys remembered (own hits of the last periods).
pub const MAX_REMEMBERED: usize = 200_000;

/// This proxy's own hits per key, and what was applied.
#[derive(Default)]
pub struct Ledger {
    keys: HashMap<Box<[u8]>, KeySync>,
}

/// A key's own hits in the three latest periods (by the server's period
/// number), and the last period whose total was applied.
#[derive(Default)]
struct KeySync {
    own: [(u64, u64); 3],
    applied: u64,
}

impl Ledger {
    /// A key's sync came back: `hits` were sent in `period`, and `previous`
    /// holds the totals of the two periods before it (the last first).
    /// Returns the others' hits not applied yet, if any. The numbers come
    /// from the store's reply: arithmetic saturates.
    pub fn synced(
        &mut self,
        tag: &[u8],
        hits: u32,
        period: u64,
        previous: [u64; 2],
    ) -> Option<u64> {
        if self.keys.len() >= MAX_REMEMBERED && !self.keys.contains_key(tag) {
            // Forget the keys not synced in the last two periods.
            self.keys
                .retain(|_, k| k.own[0].0.saturating_add(2) >= period);
        }
        let k = self.keys.entry(tag.into()).or_default();
        k.record(period, u64::from(hits));
        k.learn(period, previous)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl KeySync {
    fn record(&mut self, period: u64, hits: u64) {
        if let Some(o) = self.own.iter_mut().find(|(p, _)| *p == period) {
            o.1 = o.1.saturating_add(hits);
        } else if period > self.own[0].0 {
            self.own.rotate_right(1);
            self.own[0] = (period, hits);
        }
    }

    /// The others' hits of the two periods before `period` (totals in
    /// `previous`, the last first) not applied yet: each period once.
    fn learn(&mut self, period: u64, previous: [u64; 2]) -> Option<u64> {
        let mut others = 0;
        for (back, total) in [(2, previous[1]), (1, previous[0])] {
            let Some(q) = period.checked_sub(back) else {
                continue;
            };
            if q <= self.applied {
                continue;
            }
            self.applied = q;
            let own = self
                .own
                .iter()
                .find(|(p, _)| *p == q)
                .map_or(0, |(_, h)| *h);
            others = total.saturating_sub(own).saturating_add(others);
        }
        Some(others).filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests;
