//! Taking back, on ATS threads, what a plugin's own thread finished (a
//! store client's completions).
//!
//! Such threads may not call the TS API, so they cannot schedule the
//! wake-up themselves. Two ways bring the work back, one [`Poller`] per
//! source:
//! - **the wake channel** ([`crate::wake`]): the plugin's thread writes a
//!   byte to a socket ATS polls, and the net thread that owns it drains at
//!   once (microseconds). [`Poller::open_wake`] installs the notifier the
//!   plugin's thread calls, and opens the channel from an event on the net
//!   pool (the only threads that can own one); if ATS ends it, the next
//!   call opens another (at most once a second);
//! - **a timer**, the fallback (until the channel is open, or while it is
//!   not): the ATS thread that hands work over arms [`Poller::arm`], a
//!   one-shot timer on the net pool (requests arm it, so not ET_TASK: see
//!   [`Pool::Task`]) that drains and arms itself again while anything is
//!   outstanding. ATS runs timers off a coarse queue (a 1 ms timer fires
//!   ~10 ms late in 9.2), so it is slow but sure.
//!
//! An idle source costs nothing: no timer runs, the channel sleeps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::sched::{Pool, Timer};
use crate::wake::Waker;

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
    channel: Arc<Channel>,
    /// The notifier went to the plugin (once).
    installed: OnceLock<()>,
}

/// The current wake channel, shared with the plugin's thread's notifier.
struct Channel {
    waker: Mutex<Option<Waker>>,
    /// A live channel is installed (the fast path of `open_wake`).
    open: AtomicBool,
    /// An open is scheduled or running.
    opening: AtomicBool,
    /// A wake is on its way: the plugin's thread need not send another.
    pending: AtomicBool,
    /// When the last open was tried (ms since `epoch`; reopens at most 1/s).
    tried_ms: AtomicU64,
    epoch: Instant,
}

const REOPEN_EVERY_MS: u64 = 1000;

impl Channel {
    /// On the plugin's thread: wake the ATS side, once per pending wake.
    fn notify(&self) {
        if self.pending.swap(true, Ordering::SeqCst) {
            return;
        }
        match &*self.waker.lock() {
            Some(w) if w.alive() => w.wake(),
            // No channel: the timer drains; let the next notify try again.
            _ => self.pending.store(false, Ordering::SeqCst),
        }
    }
}

impl Poller {
    pub fn new(every: Duration) -> Poller {
        Poller {
            armed: AtomicBool::new(false),
            every,
            channel: Arc::new(Channel {
                waker: Mutex::new(None),
                open: AtomicBool::new(false),
                opening: AtomicBool::new(false),
                pending: AtomicBool::new(false),
                tried_ms: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
            installed: OnceLock::new(),
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

    /// Call on an ATS thread when handing work over. The first call gives
    /// `install` the notifier the plugin's own thread calls whenever it has
    /// handed something back (it writes a byte, and only one while a wake is
    /// pending). Any call finding no live channel schedules its opening on
    /// the net pool (at most once a second); one load when the channel is
    /// open.
    pub fn open_wake<D: Drain>(d: &Arc<D>, install: impl FnOnce(Box<dyn Fn() + Send + Sync>)) {
        let p = d.poller();
        p.installed.get_or_init(|| {
            let ch = p.channel.clone();
            install(Box::new(move || ch.notify()));
        });
        let ch = &p.channel;
        if ch.open.load(Ordering::Acquire) {
            return;
        }
        let now_ms = ch.epoch.elapsed().as_millis() as u64 + 1;
        let tried = ch.tried_ms.load(Ordering::Relaxed);
        if tried != 0 && now_ms.saturating_sub(tried) < REOPEN_EVERY_MS {
            return;
        }
        if ch.opening.swap(true, Ordering::AcqRel) {
            return;
        }
        ch.tried_ms.store(now_ms, Ordering::Relaxed);
        let weak = Arc::downgrade(d);
        let scheduled = Timer::after(Duration::ZERO, Pool::Net, move || {
            if let Some(d) = weak.upgrade() {
                open_now(&d);
            }
        });
        if let Err(e) = scheduled {
            ch.opening.store(false, Ordering::Release);
            crate::log::error(&format!("cannot schedule a wake channel's opening: {e}"));
        }
    }
}

impl Drop for Poller {
    /// The source is gone (the last rule using a store, after a reload):
    /// close the channel's end we hold, so ATS ends its side and frees it.
    /// Otherwise the connection and its continuation, which keep this
    /// channel, would keep each other for the life of the process.
    fn drop(&mut self) {
        let waker = self.channel.waker.lock().take();
        self.channel.open.store(false, Ordering::Release);
        drop(waker);
    }
}

/// Opens `d`'s wake channel; runs as an event on the net pool.
fn open_now<D: Drain>(d: &Arc<D>) {
    let ch = d.poller().channel.clone();
    let weak = Arc::downgrade(d);
    let woken = move || {
        if let Some(d) = weak.upgrade() {
            d.poller().channel.pending.store(false, Ordering::SeqCst);
            d.drain();
        }
    };
    let ended = {
        let ch = ch.clone();
        move || {
            ch.open.store(false, Ordering::Release);
            // A wake sent into the dying channel never ran `woken`: clear it,
            // or every later notify would think one is still on its way.
            ch.pending.store(false, Ordering::SeqCst);
        }
    };
    // SAFETY: this runs as an event scheduled on the net pool, i.e. on an
    // ET_NET thread, which `wake::start` requires.
    match unsafe { crate::wake::start(woken, ended) } {
        Ok(w) => {
            *ch.waker.lock() = Some(w);
            ch.pending.store(false, Ordering::SeqCst);
            ch.open.store(true, Ordering::Release);
        }
        Err(e) => crate::log::error(&format!(
            "no wake-up channel ({e}): results come back by timer (~10 ms later)"
        )),
    }
    ch.opening.store(false, Ordering::Release);
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
