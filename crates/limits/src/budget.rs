//! A bounded counter (e.g. queue capacity) whose tokens give back on drop.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct Budget {
    /// Changeable live ([`Budget::set_max`]).
    max: AtomicU32,
    used: AtomicU32,
}

/// One unit of a [`Budget`], returned when dropped.
#[derive(Debug)]
#[must_use = "dropping the token gives the unit back at once"]
pub struct BudgetToken(Arc<Budget>);

impl Budget {
    pub fn new(max: u32) -> Arc<Budget> {
        Arc::new(Budget {
            max: AtomicU32::new(max),
            used: AtomicU32::new(0),
        })
    }

    pub fn max(&self) -> u32 {
        self.max.load(Ordering::Acquire)
    }

    /// Changes the bound; units taken above a lowered bound stay taken until
    /// given back.
    pub fn set_max(&self, max: u32) {
        self.max.store(max, Ordering::Release);
    }

    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }

    /// Takes a unit unless `max` are in use.
    pub fn try_take(self: &Arc<Self>) -> Option<BudgetToken> {
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            if cur >= self.max.load(Ordering::Acquire) {
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

    #[test]
    fn a_changed_bound_applies_to_the_next_take() {
        let b = Budget::new(1);
        let t1 = b.try_take().unwrap();
        b.set_max(2);
        let t2 = b.try_take().unwrap();
        assert!(b.try_take().is_none());
        b.set_max(1);
        drop(t1);
        // Still 1 in use, at the lowered bound.
        assert!(b.try_take().is_none());
        drop(t2);
        assert!(b.try_take().is_some());
    }
}
