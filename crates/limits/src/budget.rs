//! A bounded counter (e.g. queue capacity) whose tokens give back on drop.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct Budget {
    max: u32,
    used: AtomicU32,
}

/// One unit of a [`Budget`], returned when dropped.
#[derive(Debug)]
#[must_use = "dropping the token gives the unit back at once"]
pub struct BudgetToken(Arc<Budget>);

impl Budget {
    pub fn new(max: u32) -> Arc<Budget> {
        Arc::new(Budget {
            max,
            used: AtomicU32::new(0),
        })
    }

    pub fn max(&self) -> u32 {
        self.max
    }

    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }

    /// Takes a unit unless `max` are in use.
    pub fn try_take(self: &Arc<Self>) -> Option<BudgetToken> {
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            if cur >= self.max {
                return None;
            }
            match self
                .used
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(BudgetToken(self.clone())),
                Err(actual) => cur = actual,
            }
        }
    }
}

impl Drop for BudgetToken {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_returned_on_drop() {
        let b = Budget::new(2);
        let t1 = b.try_take().unwrap();
        let _t2 = b.try_take().unwrap();
        assert!(b.try_take().is_none());
        drop(t1);
        assert_eq!(b.used(), 1);
        assert!(b.try_take().is_some());
        assert!(Budget::new(0).try_take().is_none());
    }
}
