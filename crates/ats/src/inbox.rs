//! Handing work to another net thread without ATS's retried event.
//!
//! `TSContScheduleOnThread` holds the continuation's mutex while it
//! queues the event and signals the target thread (10.1.4 InkAPI.cc:
//! `FORCE_PLUGIN_SCOPED_MUTEX` around `eth->schedule_imm`; 9.2 the same).
//! Woken at once, the target tries that mutex (`EThread::process_event`'s
//! `WEAK_MUTEX_TRY_LOCK`), finds it still held by the scheduling thread,
//! and re-queues the event `DELAY_FOR_RETRY` (10 ms) later. On two busy
//! cores that happened to 177 of 1,274 cross-thread hops (14 %) in
//! `tests/examples/store_latency.rs`: the 10 ms tail of every parked
//! transaction resumed from another thread.
//!
//! So each net thread that parks transactions gets an inbox: a bounded
//! queue and a wake channel ([`crate::wake`]) opened on that thread. Another
//! thread pushes the task and writes a byte; the target's epoll wakes, and
//! the channel's callback drains the inbox as an event scheduled on its own
//! thread (queued locally, with no signal, so never retried). No ATS mutex
//! is shared between the two threads (only the inbox's own queue lock,
//! never held across a task or a TS call). Until a thread's inbox is open, or when
//! it is full, [`crate::sched::run_on`] falls back to
//! `TSContScheduleOnThread`.
//!
//! The inboxes belong to this copy of the .so: when its last rule goes
//! ([`retire`]) they close, so a replaced copy leaves no socket behind, and
//! the next rule it makes lets hooks open them again ([`serve`]).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::event_thread::EventThread;
use crate::wake::Waker;

type Task = Box<dyn FnOnce() + Send>;

/// Most tasks waiting in one thread's inbox; past it, senders fall back to
/// `TSContScheduleOnThread` (slower, never lost).
const CAPACITY: usize = 16 * 1024;
/// A thread whose inbox could not be opened tries again after this long.
const RETRY_OPEN: Duration = Duration::from_secs(1);

struct Inbox {
    thread: EventThread,
    /// `None` once the channel ended: senders fall back.
    queue: Mutex<Option<VecDeque<Task>>>,
    /// A wake is on its way: senders need not write another byte.
    pending: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// The open inboxes, by thread (a handful: one per net thread).
static INBOXES: RwLock<Vec<Arc<Inbox>>> = RwLock::new(Vec::new());
/// This copy has no rule left: hooks of transactions still in flight do
/// not open inboxes (their hand-offs are scheduled instead).
static RETIRED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// On a net thread: its inbox is open or being opened, or when it
    /// last failed to open.
    static OPENING: Cell<Option<(bool, Instant)>> = const { Cell::new(None) };
}

/// Hands `task` to `thread`'s inbox; gives it back if there is none open
/// (or it is full), for the caller to schedule another way.
pub(crate) fn send(thread: EventThread, task: Task) -> Result<(), Task> {
    let inbox = INBOXES.read().iter().find(|i| i.thread == thread).cloned();
    let Some(inbox) = inbox else { return Err(task) };
    {
        let mut q = inbox.queue.lock();
        match q.as_mut() {
            Some(q) if q.len() < CAPACITY => q.push_back(task),
            _ => return Err(task),
        }
    }
    if !inbox.pending.swap(true, Ordering::SeqCst) {
        if let Some(w) = &*inbox.waker.lock() {
            w.wake();
        }
    }
    Ok(())
}

/// On a net thread that parks work (a hook): makes sure it has an inbox,
/// opening it from an event of its own on this thread the first time
/// (again at most once per [`RETRY_OPEN`] after a failure or an end).
pub(crate) fn ensure_here() {
    if RETIRED.load(Ordering::Relaxed) {
        return;
    }
    let now = Instant::now();
    let go = OPENING
        .try_with(|o| match o.get() {
            Some((true, _)) => false,
            Some((false, at)) if now.duration_since(at) < RETRY_OPEN => false,
            _ => {
                o.set(Some((true, now)));
                true
            }
        })
        .unwrap_or(false);
    if !go {
        return;
    }
    let Some(here) = EventThread::current() else {
        // Not an event thread: forget the attempt (hooks never get here).
        let _ = OPENING.try_with(|o| o.set(None));
        return;
    };
    // Same thread: queued locally, no retry (see the module's doc).
    let scheduled = crate::sched::run_on(here, move || open(here));
    if let Err(e) = scheduled {
        failed(&format!("cannot schedule its opening: {e}"));
    }
}

fn failed(why: &str) {
    crate::log::error(&format!(
        "no inbox on this net thread ({why}): work for it is scheduled (may wait ~10 ms)"
    ));
    let _ = OPENING.try_with(|o| o.set(Some((false, Instant::now()))));
}

/// Opens `here`'s inbox; runs as an event on `here`, a net thread.
fn open(here: EventThread) {
    let inbox = Arc::new(Inbox {
        thread: here,
        queue: Mutex::new(Some(VecDeque::new())),
        pending: AtomicBool::new(false),
        waker: Mutex::new(None),
    });
    let woken = {
        let inbox = Arc::downgrade(&inbox);
        move || {
            if let Some(i) = inbox.upgrade() {
                drain(&i);
            }
        }
    };
    // Strong: a retired inbox, gone from `INBOXES`, still runs what was
    // queued before its channel ended (no cycle: the channel owns this).
    let ended = {
        let inbox = inbox.clone();
        move || end(inbox.clone())
    };
    // SAFETY: `ensure_here` runs in a hook of a transaction or connection,
    // i.e. on an ET_NET thread, and schedules this on that same thread,
    // which is what `wake::start` requires.
    match unsafe { crate::wake::start(woken, ended) } {
        Ok(w) => {
            // Under the lock `retire` takes: either it closes this inbox
            // or this sees the copy retired and closes the channel itself
            // (its end, on this thread, then finds no waker: retired).
            let mut open = INBOXES.write();
            if RETIRED.load(Ordering::SeqCst) {
                drop(open);
                drop(w);
                return;
            }
            *inbox.waker.lock() = Some(w);
            open.push(inbox);
        }
        Err(e) => failed(&e),
    }
}

/// On the inbox's thread, as an event of its own: runs what was sent.
fn drain(inbox: &Inbox) {
    // Cleared first: a task pushed after the take below writes a new byte.
    inbox.pending.store(false, Ordering::SeqCst);
    let tasks = match inbox.queue.lock().as_mut() {
        Some(q) => std::mem::take(q),
        None => return,
    };
    for task in tasks {
        crate::guard::catch("inbox task", || (), task);
    }
}

/// This copy's last rule is gone (`TSRemapDone`, any thread): closes every
/// inbox. Senders fall back from now on; each channel's end, on its own
/// thread, runs what was queued before it.
pub(crate) fn retire() {
    RETIRED.store(true, Ordering::SeqCst);
    let closing = std::mem::take(&mut *INBOXES.write());
    for inbox in closing {
        // Closing our end of the socket pair ends the channel (`wake`).
        drop(inbox.waker.lock().take());
    }
}

/// This copy made a rule: hooks may open inboxes again.
pub(crate) fn serve() {
    RETIRED.store(false, Ordering::SeqCst);
}

/// ATS ended the channel (on its thread): no more sends; what is queued
/// runs from an event of its own; the next hook opens a new inbox.
fn end(inbox: Arc<Inbox>) {
    INBOXES.write().retain(|i| !Arc::ptr_eq(i, &inbox));
    let left = inbox.queue.lock().take().unwrap_or_default();
    // Taken by `retire` already when the copy's rules are gone: expected.
    let retired = inbox.waker.lock().take().is_none();
    if retired {
        crate::log::debug("a net thread's inbox closed (no rule of this copy is left)");
        let _ = OPENING.try_with(|o| o.set(None));
    } else {
        crate::log::error("a net thread's inbox ended: reopened at its next hook");
        let _ = OPENING.try_with(|o| o.set(Some((false, Instant::now()))));
    }
    if left.is_empty() {
        return;
    }
    let sent = crate::sched::run_on(inbox.thread, move || {
        for task in left {
            crate::guard::catch("inbox task", || (), task);
        }
    });
    if let Err(e) = sent {
        // The tasks were dropped unrun (a parked transaction's token fails
        // it safe when dropped).
        crate::log::error(&format!("cannot run an ended inbox's tasks: {e}"));
    }
}
