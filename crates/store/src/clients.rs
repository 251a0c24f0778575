//! Clients (and the `--store-sync` syncers built on them) shared by the rules
//! that use them. `Clients` only refers to each weakly: one lives while a rule or
//! a request in flight holds it, so a reload that drops or changes a rule's
//! `--store` stops its client (its thread exits, its connection closes).

use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The live values of one kind, found by a match on their settings.
pub struct Clients<T> {
    live: Mutex<Vec<Weak<T>>>,
}

impl<T> Clients<T> {
    pub const fn new() -> Self {
        Clients {
            live: Mutex::new(Vec::new()),
        }
    }

    /// The live value that `matches`, else the one `make` starts (under the
    /// registry's lock, so two rules never start the same one twice).
    pub fn get_or_start<E>(
        &self,
        matches: impl Fn(&T) -> bool,
        make: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<Arc<T>, E> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|w| w.strong_count() > 0);
        if let Some(t) = live.iter().filter_map(Weak::upgrade).find(|t| matches(t)) {
            return Ok(t);
        }
        let t = make()?;
        live.push(Arc::downgrade(&t));
        Ok(t)
    }

    /// How many are still held.
    pub fn live(&self) -> usize {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|w| w.strong_count() > 0);
        live.len()
    }
}

impl<T> Default for Clients<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_is_shared_and_a_dropped_one_is_forgotten() {
        let reg = Clients::<u32>::new();
        let start = |v| move || Ok::<_, ()>(Arc::new(v));
        let a = reg.get_or_start(|&v| v == 1, start(1)).unwrap();
        let b = reg.get_or_start(|&v| v == 1, start(99)).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = reg.get_or_start(|&v| v == 2, start(2)).unwrap();
        assert_eq!(reg.live(), 2);
        drop((a, b));
        assert_eq!(reg.live(), 1);
        let d = reg.get_or_start(|&v| v == 1, start(1)).unwrap();
        assert_eq!((*d, reg.live()), (1, 2));
        assert_eq!(reg.get_or_start(|&v| v == 3, || Err("no")), Err("no"));
        assert_eq!(reg.live(), 2);
        drop(c);
    }
}
