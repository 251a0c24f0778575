//! Waking ATS from a plugin's own thread without calling the TS API.
//!
//! A timer cannot do it promptly: ATS runs timed events off a coarse queue
//! (a 1 ms `TSContScheduleOnPool` fires ~10 ms later in 9.2, measured). Here
//! the plugin's thread writes one byte to a socket pair ([`Waker::wake`], a
//! plain `send`); ATS polls the other end as a net connection
//! (`TSVConnFdCreate` + `TSVConnRead`), so its epoll wakes the net thread
//! that owns it, which runs the plugin's callback.
//!
//! [`crate::poller`] opens channels from an event it scheduled on the net
//! pool, and [`crate::inbox`] from an event on the net thread that parked a
//! transaction or handshake: `TSVConnFdCreate` uses the calling thread's
//! net handler, which only ET_NET threads have (hooks run there). Timeouts are cancelled (and cancelled again if
//! ATS still sends one); if ATS ends the connection (EOS, an error), the
//! channel is closed and freed and `on_end` runs, so the poller can open a
//! new one while its timer carries on.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{guard, sys};

/// Wakes the ATS side; callable from any thread (it only writes a byte).
pub struct Waker {
    fd: OwnedFd,
    alive: Arc<AtomicBool>,
    /// Set when the owner drops this end on purpose (its source is gone):
    /// the end ATS then sees is expected, not an error.
    retired: Arc<AtomicBool>,
}

impl Drop for Waker {
    /// Closing our end ends the channel: ATS reads EOS and the handler
    /// frees the connection, its buffer and continuation.
    fn drop(&mut self) {
        self.retired.store(true, Ordering::Release);
    }
}

impl Waker {
    /// Makes the callback run soon on the ATS net thread. Never blocks: if
    /// the socket is full, wakes are already pending.
    pub fn wake(&self) {
        let byte = 1u8;
        // SAFETY: send on a socket we own, with a valid 1-byte buffer;
        // MSG_DONTWAIT never blocks and MSG_NOSIGNAL never raises SIGPIPE.
        unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                (&byte as *const u8).cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            );
        }
    }

    /// False once ATS ended the connection.
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

struct Inner {
    vc: sys::TSVConn,
    buf: sys::TSIOBuffer,
    reader: sys::TSIOBufferReader,
    alive: Arc<AtomicBool>,
    retired: Arc<AtomicBool>,
    on_wake: Arc<dyn Fn() + Send + Sync>,
    on_end: Box<dyn Fn() + Send + Sync>,
}

/// Opens a wake-up channel whose `on_wake` runs on this net thread, as an
/// event of its own, after one or more [`Waker::wake`]s.
///
/// # Safety
/// Must be called on an ET_NET thread (an event scheduled on the net pool):
/// `TSVConnFdCreate` uses the calling thread's net handler, and on any other
/// thread (ET_TASK, the main thread) that is not there.
pub(crate) unsafe fn start(
    on_wake: impl Fn() + Send + Sync + 'static,
    on_end: impl Fn() + Send + Sync + 'static,
) -> Result<Waker, String> {
    if crate::EventThread::current().is_none() {
        return Err("wake::start called off an ATS event thread".into());
    }
    let mut fds = [-1 as c_int; 2];
    // SAFETY: valid out array of two ints.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (ats_end, ours) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: a connected socket, on a net thread (the caller's contract);
    // ATS takes ownership of it on success.
    let vc = unsafe { sys::TSVConnFdCreate(ats_end.as_raw_fd()) };
    if vc.is_null() {
        return Err("TSVConnFdCreate failed".into());
    }
    // ATS owns the descriptor now (it closes it with the connection).
    std::mem::forget(ats_end);
    // SAFETY: live connection; a wake channel may stay idle for days.
    unsafe {
        sys::TSVConnInactivityTimeoutCancel(vc);
        sys::TSVConnActiveTimeoutCancel(vc);
    }
    // SAFETY: no preconditions.
    let mutex = unsafe { sys::TSMutexCreate() };
    // SAFETY: valid handler; the continuation owns the mutex.
    let cont = unsafe { sys::TSContCreate(Some(wake_handler), mutex) };
    if cont.is_null() {
        // SAFETY: live connection, not used afterwards.
        unsafe { sys::TSVConnClose(vc) };
        return Err("TSContCreate failed".into());
    }
    // SAFETY: no preconditions; freed with the channel.
    let buf = unsafe { sys::TSIOBufferCreate() };
    // SAFETY: live buffer.
    let reader = unsafe { sys::TSIOBufferReaderAlloc(buf) };
    let alive = Arc::new(AtomicBool::new(true));
    let retired = Arc::new(AtomicBool::new(false));
    let inner = Box::new(Inner {
        vc,
        buf,
        reader,
        alive: alive.clone(),
        retired: retired.clone(),
        on_wake: Arc::new(on_wake),
        on_end: Box::new(on_end),
    });
    // SAFETY: live continuation and connection; the box is reclaimed by the
    // handler when the channel ends. The mutex is held while the read
    // starts, so the handler cannot run before it is set up.
    unsafe {
        sys::TSContDataSet(cont, Box::into_raw(inner).cast());
        sys::TSMutexLock(mutex);
        sys::TSVConnRead(vc, cont, buf, i64::MAX);
        sys::TSMutexUnlock(mutex);
    }
    Ok(Waker {
        fd: ours,
        alive,
        retired,
    })
}

unsafe extern "C" fn wake_handler(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    let data = sys_data(cont);
    // SAFETY: the data is the Inner leaked in `start`, alive until the end
    // below reclaims it (no event follows that).
    let inner = unsafe { &*data };
    match ev {
        sys::TSEvent::TS_EVENT_VCONN_READ_READY => {
            // SAFETY: live reader of this connection's buffer, under its mutex.
            unsafe {
                let n = sys::TSIOBufferReaderAvail(inner.reader);
                sys::TSIOBufferReaderConsume(inner.reader, n);
            }
            // SAFETY: for READ_READY the event data is the read VIO.
            unsafe { sys::TSVIOReenable(edata as sys::TSVIO) };
            // As an event of its own on this thread, not inside the
            // connection's I/O callback: there ATS holds the net handler's
            // locks, and a transaction resumed inline found them taken and
            // retried 10 ms later (measured: 1 decision in 10 took ~10 ms).
            let f = inner.on_wake.clone();
            let here = crate::EventThread::current();
            let sent = here.map(|t| crate::sched::run_on(t, move || f()));
            if !matches!(sent, Some(Ok(()))) {
                guard::catch("wake", || (), || (inner.on_wake)());
            }
        }
        sys::TSEvent::TS_EVENT_VCONN_INACTIVITY_TIMEOUT
        | sys::TSEvent::TS_EVENT_VCONN_ACTIVE_TIMEOUT => {
            // ATS's default timeouts can still reach an idle channel: cancel
            // them again and keep reading.
            // SAFETY: live connection under its continuation's mutex; for
            // these events the event data is the read VIO.
            unsafe {
                sys::TSVConnInactivityTimeoutCancel(inner.vc);
                sys::TSVConnActiveTimeoutCancel(inner.vc);
                sys::TSVIOReenable(edata as sys::TSVIO);
            }
        }
        _ => {
            // EOS, an error, or the (never reached) end of the read: close
            // and free the channel; the poller's timer carries on and it
            // may open another.
            if inner.retired.load(Ordering::Acquire) {
                crate::log::debug("wake channel closed (its source is gone)");
            } else {
                crate::log::error(&format!(
                    "wake channel ended (event {}): results come back by timer until it is reopened",
                    ev.0
                ));
            }
            // SAFETY: reclaim the box (not used afterwards), close the
            // connection and free its buffer, then destroy this one-shot
            // owner of them from its own handler; no further event arrives
            // for a closed connection.
            let inner = unsafe { Box::from_raw(data) };
            inner.alive.store(false, Ordering::Release);
            // SAFETY: the connection and buffer are ours and used by nothing
            // else; closed and freed once, here.
            unsafe {
                sys::TSVConnClose(inner.vc);
                sys::TSIOBufferDestroy(inner.buf);
            }
            guard::catch("wake (ended)", || (), || (inner.on_end)());
            guard::catch("wake (ended)", || (), move || drop(inner));
            // SAFETY: see above.
            unsafe { sys::TSContDestroy(cont) };
        }
    }
    0
}

fn sys_data(cont: sys::TSCont) -> *mut Inner {
    // SAFETY: live continuation (we are in its handler).
    unsafe { sys::TSContDataGet(cont) as *mut Inner }
}
