//! `--conntrack`: the transactions of one session (its HTTP/2 streams)
//! waiting in limiters' queues. When one of them keeps the session's slot,
//! exactly these leave the queue and pass with it: O(the session's waiters),
//! never a scan of a queue that other clients may have filled.

use limits::{Ticket, Waiter, WeakTicket};

/// Most waiters a session tracks. ATS lets a client 100 concurrent streams
/// by default (`proxy.config.http2.max_concurrent_streams_in`); a stream
/// past this bound still passes with its session, at its own turn in the
/// queue (then it gives its slot back).
pub const MAX_MATES: usize = 1024;

/// The list is pruned of waiters that left the queue once it (plus the adds
/// refused since, the list being full) reaches twice its live size at the
/// last prune, and at least this: amortized O(1) an add, full or not.
const PRUNE_MIN: usize = 16;

/// A session's waiters, by limiter id. Weak: a waiter refers to its session,
/// and the queue, not this list, owns it.
pub struct Mates<W: Waiter> {
    list: Vec<(u64, WeakTicket<W>)>,
    prune_at: usize,
    /// Adds refused (full) since the last prune.
    refused: usize,
}

impl<W: Waiter> Default for Mates<W> {
    fn default() -> Self {
        Mates {
            list: Vec::new(),
            prune_at: PRUNE_MIN,
            refused: 0,
        }
    }
}

impl<W: Waiter> Mates<W> {
    /// Notes a waiter of `limiter`; false if the list is full of live ones.
    pub fn add(&mut self, limiter: u64, t: &Ticket<W>) -> bool {
        if self.list.len() + self.refused >= self.prune_at {
            self.list.retain(|(_, w)| w.is_waiting());
            self.refused = 0;
            self.prune_at = (self.list.len() * 2).max(PRUNE_MIN);
        }
        if self.list.len() >= MAX_MATES {
            self.refused += 1;
            return false;
        }
        self.list.push((limiter, t.downgrade()));
        true
    }

    /// Takes `limiter`'s waiters out of its queue (those still in it) and
    /// forgets them. Nothing to do, and no allocation, for a session that
    /// has none (an HTTP/1.1 connection has at most itself, already out).
    pub fn take(&mut self, limiter: u64) -> Vec<W> {
        let mut out = Vec::new();
        self.list.retain(|(l, t)| {
            if *l != limiter {
                return true;
            }
            out.extend(t.cancel());
            false
        });
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.list.len()
    }
}

#[cfg(test)]
mod tests;
