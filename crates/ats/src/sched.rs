//! One-shot and periodic work on ATS event threads.
//!
//! Facts from 9.2's InkAPI.cc that shape this module:
//! - a scheduled continuation must have a mutex, which the continuation owns:
//!   it is freed with the continuation, so it must not be touched afterwards;
//! - `TSActionCancel` only flags the event; it is safe only while holding the
//!   continuation's mutex and only if the event has not run yet (a run event
//!   is freed and its memory reused);
//! - `TSContDestroy` from inside a one-shot handler frees at once; from inside
//!   a *periodic* handler it races ATS's own bookkeeping. So periodic work is
//!   a one-shot that re-arms itself, and stopping it takes effect at the next tick.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::event_thread::EventThread;
use crate::{guard, sys};

/// ATS thread pool to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// ET_NET: where transactions run; for short work that touches them.
    Net,
    /// ET_TASK: for slower housekeeping (logging, file I/O). Never from a
    /// request path: 9.2 opens its ports (`start_HttpProxyServer`) before
    /// it starts the task threads, and an event scheduled onto ET_TASK
    /// between the pool's registration and its threads' start dereferences
    /// a thread that does not exist yet (`ProtectedQueue::enqueue`; seen
    /// crashing a freshly started server in 2 runs of 14). Work a request
    /// schedules goes to [`Pool::Net`] or to its own thread; rules schedule
    /// onto ET_TASK when they are created (before the ports open, or after
    /// the task threads run), and so do management commands.
    Task,
}

impl Pool {
    fn sys(self) -> sys::TSThreadPool {
        match self {
            Pool::Net => sys::TSThreadPool::TS_THREAD_POOL_NET,
            Pool::Task => sys::TSThreadPool::TS_THREAD_POOL_TASK,
        }
    }
}

/// Where scheduled work runs: any thread of a pool, or one event thread
/// (a transaction's own, see [`crate::Parked::home`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Pool(Pool),
    Thread(EventThread),
}

impl From<Pool> for Target {
    fn from(p: Pool) -> Target {
        Target::Pool(p)
    }
}

impl From<EventThread> for Target {
    fn from(t: EventThread) -> Target {
        Target::Thread(t)
    }
}

impl Target {
    /// # Safety
    /// `cont` is a live continuation with a mutex, which the caller holds.
    unsafe fn schedule(self, cont: sys::TSCont, after: Duration) -> sys::TSAction {
        match self {
            // SAFETY: per the contract.
            Target::Pool(p) => unsafe { sys::TSContScheduleOnPool(cont, millis(after), p.sys()) },
            // SAFETY: per the contract; the thread handle is non-null.
            Target::Thread(t) => unsafe {
                sys::TSContScheduleOnThread(cont, millis(after), t.as_ptr())
            },
        }
    }
}

/// Runs `task` as soon as possible on `thread`, as an event of its own (never
/// inline). Must be called on an ATS thread; on error the task is dropped
/// unrun. `thread` is a net thread (a transaction's or connection's home).
///
/// From another thread it goes through `thread`'s inbox when it has one
/// (`crate::inbox`): `TSContScheduleOnThread` across threads meets ATS's
/// 10 ms retry about once in seven hops on two busy cores.
pub fn run_on(thread: EventThread, task: impl FnOnce() + Send + 'static) -> Result<(), String> {
    if !on_ats_thread() {
        return Err("run_on called off an ATS thread".into());
    }
    let task: Box<dyn FnOnce() + Send> = if EventThread::current() == Some(thread) {
        Box::new(task)
    } else {
        match crate::inbox::send(thread, Box::new(task)) {
            Ok(()) => return Ok(()),
            Err(task) => task,
        }
    };
    Timer::after(Duration::ZERO, thread, task).map(drop)
}

fn millis(d: Duration) -> sys::TSHRTime {
    sys::TSHRTime::try_from(d.as_millis()).unwrap_or(sys::TSHRTime::MAX)
}

/// True on a thread ATS created (event threads, the main thread).
fn on_ats_thread() -> bool {
    // SAFETY: no preconditions; returns null off ATS threads.
    !unsafe { sys::TSThreadSelf() }.is_null()
}

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLING: u8 = 2;
const FIRED_AFTER_CANCEL: u8 = 3;
/// Cancelled from a non-ATS thread: the handler cleans up when it runs.
const CANCELLED_LAZY: u8 = 4;

struct TimerInner {
    state: AtomicU8,
    cont: sys::TSCont,
    mutex: sys::TSMutex,
    /// Written under the continuation's mutex before the handler can run.
    action: UnsafeCell<sys::TSAction>,
    task: UnsafeCell<Option<Box<dyn FnOnce() + Send>>>,
}

// SAFETY: `action` and `task` are only touched by the one party that won the
// `state` CAS (or under the continuation mutex); the raw TS pointers are
// usable from any ATS thread.
unsafe impl Send for TimerInner {}
// SAFETY: see Send.
unsafe impl Sync for TimerInner {}

/// A one-shot timer. Dropping the handle does not cancel it; [`Timer::cancel`] does.
pub struct Timer {
    inner: Arc<TimerInner>,
}

impl Timer {
    /// Runs `task` once, `after` from now, on `target` (a pool or one
    /// thread). Must be called on an ATS thread.
    pub fn after(
        after: Duration,
        target: impl Into<Target>,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<Timer, String> {
        let target = target.into();
        if !on_ats_thread() {
            return Err("Timer::after called off an ATS thread".into());
        }
        // SAFETY: no preconditions.
        let mutex = unsafe { sys::TSMutexCreate() };
        // SAFETY: valid handler; the continuation takes ownership of the mutex.
        let cont = unsafe { sys::TSContCreate(Some(timer_handler), mutex) };
        if cont.is_null() {
            return Err("TSContCreate failed".into());
        }
        let inner = Arc::new(TimerInner {
            state: AtomicU8::new(PENDING),
            cont,
            mutex,
            action: UnsafeCell::new(std::ptr::null_mut()),
            task: UnsafeCell::new(Some(Box::new(task))),
        });
        // The continuation owns one reference, released when it fires or is cancelled.
        let data = Arc::into_raw(inner.clone());
        // SAFETY: live continuation and mutex; holding the (recursive) mutex while
        // scheduling keeps the handler out until `action` is recorded.
        unsafe {
            sys::TSContDataSet(cont, data as *mut c_void);
            sys::TSMutexLock(mutex);
            *inner.action.get() = target.schedule(cont, after);
            sys::TSMutexUnlock(mutex);
        }
        Ok(Timer { inner })
    }

    /// Cancels the timer if it has not started running. Returns true if the
    /// task will not run. Off an ATS thread the task is dropped unrun but the
    /// event lingers until its time.
    pub fn cancel(&self) -> bool {
        let inner = &*self.inner;
        if !on_ats_thread() {
            return inner
                .state
                .compare_exchange(PENDING, CANCELLED_LAZY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        if inner
            .state
            .compare_exchange(PENDING, CANCELLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // From here only we destroy the continuation, so its mutex is alive.
        // SAFETY: live mutex (see above); we are on an ATS thread.
        unsafe { sys::TSMutexLock(inner.mutex) };
        if inner.state.load(Ordering::Acquire) == CANCELLING {
            // The event has not run (it needs the mutex we hold): cancel it.
            // SAFETY: un-run event of this continuation, cancelled under its mutex.
            unsafe { sys::TSActionCancel(*inner.action.get()) };
        }
        // SAFETY: we hold the mutex; the continuation is alive.
        unsafe { sys::TSMutexUnlock(inner.mutex) };
        // SAFETY: the CAS gave us exclusive access to the task.
        drop(unsafe { (*inner.task.get()).take() });
        // SAFETY: the continuation will receive no more events; release it and
        // the reference it held (set in `after`).
        unsafe {
            sys::TSContDestroy(inner.cont);
            drop(Arc::from_raw(Arc::as_ptr(&self.inner)));
        }
        true
    }
}

unsafe extern "C" fn timer_handler(
    cont: sys::TSCont,
    _ev: sys::TSEvent,
    _edata: *mut c_void,
) -> c_int {
    // SAFETY: the data is the Arc<TimerInner> reference leaked in Timer::after.
    let inner = unsafe { Arc::from_raw(sys::TSContDataGet(cont) as *const TimerInner) };
    match inner
        .state
        .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => {
            // SAFETY: winning the CAS gives exclusive access to the task.
            if let Some(task) = unsafe { (*inner.task.get()).take() } {
                guard::catch("timer", || (), task);
            }
        }
        Err(CANCELLING) => {
            // The canceller is waiting for the mutex; it cleans up.
            inner.state.store(FIRED_AFTER_CANCEL, Ordering::Release);
            std::mem::forget(inner); // its reference is released by the canceller
            return 0;
        }
        Err(_) => {
            // CANCELLED_LAZY: drop the task unrun (its captures may run plugin
            // code on drop, so inside the guard).
            // SAFETY: the lazy canceller never touches the task after its CAS.
            let task = unsafe { (*inner.task.get()).take() };
            guard::catch("timer (cancelled)", || (), move || drop(task));
        }
    }
    // SAFETY: one-shot handler: destroying here frees the continuation at once,
    // and nothing touches it afterwards.
    unsafe { sys::TSContDestroy(cont) };
    drop(inner);
    0
}

/// Work repeated every `every` until stopped. Dropping the handle stops it;
/// the closure and what it captures are released at the next tick.
pub struct Periodic {
    stop: Arc<AtomicBool>,
}

struct PeriodicInner {
    stop: Arc<AtomicBool>,
    every: Duration,
    pool: Pool,
    /// Only touched by the handler, which ATS serialises with the mutex.
    next: UnsafeCell<Instant>,
    work: Box<dyn Fn() + Send + Sync>,
}

// SAFETY: `next` is only accessed by the handler under the continuation mutex.
unsafe impl Sync for PeriodicInner {}

impl Periodic {
    /// Starts running `work` every `every`: first on `pool`, then on the
    /// thread that ran it first. Must be called on an ATS thread.
    pub fn start(
        every: Duration,
        pool: Pool,
        work: impl Fn() + Send + Sync + 'static,
    ) -> Result<Periodic, String> {
        if !on_ats_thread() {
            return Err("Periodic::start called off an ATS thread".into());
        }
        let every = every.max(Duration::from_millis(1));
        let stop = Arc::new(AtomicBool::new(false));
        let inner = Box::new(PeriodicInner {
            stop: stop.clone(),
            every,
            pool,
            next: UnsafeCell::new(Instant::now() + every),
            work: Box::new(work),
        });
        // SAFETY: no preconditions.
        let mutex = unsafe { sys::TSMutexCreate() };
        // SAFETY: valid handler; the continuation owns the mutex.
        let cont = unsafe { sys::TSContCreate(Some(periodic_handler), mutex) };
        if cont.is_null() {
            return Err("TSContCreate failed".into());
        }
        // SAFETY: live continuation; the box is reclaimed by the handler on stop.
        unsafe {
            sys::TSContDataSet(cont, Box::into_raw(inner) as *mut c_void);
            sys::TSContScheduleOnPool(cont, millis(every), pool.sys());
        }
        Ok(Periodic { stop })
    }

    /// Stops the work; takes effect at the next tick.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop();
    }
}

unsafe extern "C" fn periodic_handler(
    cont: sys::TSCont,
    _ev: sys::TSEvent,
    _edata: *mut c_void,
) -> c_int {
    let data = sys_data(cont);
    // SAFETY: the data is the Box<PeriodicInner> leaked in Periodic::start,
    // alive until this handler reclaims it below.
    let inner = unsafe { &*data };
    if !inner.stop.load(Ordering::Acquire) {
        guard::catch("periodic task", || (), || (inner.work)());
    }
    if inner.stop.load(Ordering::Acquire) {
        // SAFETY: reclaim the box (it is not used below), then destroy the
        // one-shot continuation from its own handler (freed at once; nothing
        // touches it afterwards).
        let inner = unsafe { Box::from_raw(data) };
        // The closure's captures may run plugin code on drop.
        guard::catch("periodic task (stopped)", || (), move || drop(inner));
        // SAFETY: see above.
        unsafe { sys::TSContDestroy(cont) };
        return 0;
    }
    // Re-arm on the original cadence; after a long stall, restart from now.
    let now = Instant::now();
    // SAFETY: `next` is only touched here, under the continuation's mutex.
    let next = unsafe { &mut *inner.next.get() };
    *next += inner.every;
    if *next <= now {
        *next = now + inner.every;
    }
    let delay = next
        .saturating_duration_since(now)
        .max(Duration::from_millis(1));
    // Again on this thread rather than the pool: a task started with the
    // rules runs first close to when 9.2 starts its task threads, and a
    // schedule onto ET_TASK in that window crashes it (see `Pool::Task`;
    // seen in 1 run of 5 with a 10 ms task). Staying put never looks the
    // pool up; the work keeps the thread its first run got.
    let here = EventThread::current().map_or(Target::Pool(inner.pool), Target::Thread);
    // SAFETY: live continuation, on an ATS thread (we are in its handler,
    // which holds the continuation's mutex).
    unsafe { here.schedule(cont, delay) };
    0
}

fn sys_data(cont: sys::TSCont) -> *mut PeriodicInner {
    // SAFETY: live continuation (we are in its handler).
    unsafe { sys::TSContDataGet(cont) as *mut PeriodicInner }
}
