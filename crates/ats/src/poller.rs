//! Taking back, on ATS threads, what a plugin's own thread finished (a
//! store client's completions, a socket reader's datagrams).
//!
//! Such threads may not call the TS API, so they cannot schedule the
//! wake-up themselves. Instead the ATS thread that hands them work arms a
//! [`Poller`]: a one-shot timer on the net pool (requests arm it, so not
//! ET_TASK: see [`Pool::Task`]) that drains what is ready
//! and arms itself again while anything is still outstanding, so an idle
//! plugin costs nothing and a busy one is looked at every `every`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::sched::{Pool, Timer};

/// Something with outstanding work to take back on the task pool.
pub trait Drain: Send + Sync + 'static {
    fn poller(&self) -> &Poller;
    /// Handles what is ready (on a net thread: keep it short).
    fn drain(self: &Arc<Self>);
    /// Whether anything is still to come back.
    fn outstanding(&self) -> bool;
}

/// One drainer's timer state.
pub struct Poller {
    armed: AtomicBool,
    every: Duration,
}

impl Poller {
    pub const fn new(every: Duration) -> Poller {
        Poller {
            armed: AtomicBool::new(false),
            every,
        }
    }

    /// Makes sure `d` is drained within `every`; call it on an ATS thread
    /// after handing work over. Cheap when already armed (one swap).
    pub fn arm<D: Drain>(d: &Arc<D>) {
        let p = d.poller();
        if p.armed.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = d.clone();
        if let Err(e) = Timer::after(p.every, Pool::Net, move || run(me)) {
            p.armed.store(false, Ordering::SeqCst);
            crate::log::error(&format!("cannot arm a poller: {e}"));
        }
    }
}

fn run<D: Drain>(d: Arc<D>) {
    d.drain();
    d.poller().armed.store(false, Ordering::SeqCst);
    // Work handed over while `armed` was still set did not arm: this
    // re-check, after clearing it, is what sees that work.
    if d.outstanding() {
        Poller::arm(&d);
    }
}
