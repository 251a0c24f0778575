//! Taking back, on ATS threads, what a plugin's own thread finished (a
//! store client's completions).
//!
//! Such threads may not call the TS API, so they cannot schedule the
//! wake-up themselves. Two ways bring the work back, one [`Poller`] per
//! source:
//! - **the wake channel** ([`crate::wake`]): the plugin's thread writes a
//!   byte to a socket ATS polls, and the net thread that owns it drains at
//!   once (microseconds). It is opened by [`Poller::open_wake`] on a net
//!   thread, and the plugin hands the returned notifier to its thread;
//! - **a timer**, the fallback (and the only way before the channel is
//!   open, or if ATS ever ends it): the ATS thread that hands work over
//!   arms [`Poller::arm`], a one-shot timer on the net pool (requests arm
//!   it, so not ET_TASK: see [`Pool::Task`]) that drains and arms itself
//!   again while anything is outstanding. ATS runs timers off a coarse
//!   queue (a 1 ms timer fires ~10 ms late in 9.2), so it is slow but sure.
//!
//! An idle source costs nothing: no timer runs, the channel sleeps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::sched::{Pool, Timer};

/// Something with outstanding work to take back on a net thread.
pub trait Drain: Send + Sync + 'static {
    fn poller(&self) -> &Poller;
    /// Handles what is ready (on a net thread: keep it short).
    fn drain(&self);
    /// Whether anything is still to come back.
    fn outstanding(&self) -> bool;
}

/// One source's timer and wake-channel state.
pub struct Poller {
    armed: AtomicBool,
    every: Duration,
    wake: OnceLock<()>,
    /// A wake is on its way: the plugin's thread need not send another.
    wake_pending: Arc<AtomicBool>,
}

impl Poller {
    pub fn new(every: Duration) -> Poller {
        Poller {
            armed: AtomicBool::new(false),
            every,
            wake: OnceLock::new(),
            wake_pending: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes sure `d` is drained within `every` (give or take ATS's timer
    /// granularity); call it on an ATS thread after handing work over.
    /// Cheap when already armed (one swap).
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

    /// On a net thread (a hook), the first time only: opens `d`'s wake
    /// channel and gives `install` the notifier the plugin's own thread
    /// calls whenever it has handed something back (it only writes a byte,
    /// and only one while a wake is pending). Later calls do nothing. If
    /// the channel cannot be opened, `d` is drained by timer only (logged).
    pub fn open_wake<D: Drain>(d: &Arc<D>, install: impl FnOnce(Box<dyn Fn() + Send + Sync>)) {
        let p = d.poller();
        p.wake.get_or_init(|| {
            let weak = Arc::downgrade(d);
            let woken = move || {
                if let Some(d) = weak.upgrade() {
                    d.poller().wake_pending.store(false, Ordering::SeqCst);
                    d.drain();
                }
            };
            match crate::wake::start(woken) {
                Ok(w) => {
                    let pending = p.wake_pending.clone();
                    install(Box::new(move || {
                        if !pending.swap(true, Ordering::SeqCst) {
                            w.wake();
                        }
                    }));
                }
                Err(e) => crate::log::error(&format!(
                    "no wake-up channel ({e}): results come back by timer only (~10 ms later)"
                )),
            }
        });
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
