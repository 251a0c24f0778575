//! Waking ATS from a plugin's own thread without calling the TS API.
//!
//! A timer cannot do it promptly: ATS runs timed events off a coarse queue
//! (a 1 ms `TSContScheduleOnPool` fires ~10 ms later in 9.2, measured). Here
//! the plugin's thread writes one byte to a socket pair ([`Waker::wake`], a
//! plain `send`); ATS polls the other end as a net connection
//! (`TSVConnFdCreate` + `TSVConnRead`), so its epoll wakes the net thread
//! that owns it, which runs the plugin's callback ([`start`]).
//!
//! The connection lives as long as the process (inactivity timeout
//! cancelled). If ATS ever ends it (an error), the callback stops being
//! called: users keep a slower fallback (a timer) for that case.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::{guard, sys};

/// Wakes the ATS side; callable from any thread (it only writes a byte).
#[derive(Clone)]
pub struct Waker {
    fd: Arc<OwnedFd>,
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
}

struct Inner {
    reader: sys::TSIOBufferReader,
    on_wake: Arc<dyn Fn() + Send + Sync>,
}

/// Starts a wake-up channel whose callback runs on this net thread, as an
/// event of its own, after one or more [`Waker::wake`]s. Call it
/// on an ATS **net** thread (a hook handler): `TSVConnFdCreate` needs that
/// thread's net handler. The channel and callback are never freed.
pub fn start(on_wake: impl Fn() + Send + Sync + 'static) -> Result<Waker, String> {
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
    // SAFETY: a connected socket; ATS takes ownership of it on success.
    let vc = unsafe { sys::TSVConnFdCreate(ats_end.as_raw_fd()) };
    if vc.is_null() {
        return Err("TSVConnFdCreate failed".into());
    }
    // ATS owns the descriptor now (it closes it with the connection).
    std::mem::forget(ats_end);
    // SAFETY: live connection; a wake channel may stay idle for days.
    unsafe { sys::TSVConnInactivityTimeoutCancel(vc) };
    // SAFETY: no preconditions.
    let mutex = unsafe { sys::TSMutexCreate() };
    // SAFETY: valid handler; the continuation owns the mutex.
    let cont = unsafe { sys::TSContCreate(Some(wake_handler), mutex) };
    if cont.is_null() {
        // SAFETY: live connection, not used afterwards.
        unsafe { sys::TSVConnClose(vc) };
        return Err("TSContCreate failed".into());
    }
    // SAFETY: no preconditions; the buffer lives as long as the channel.
    let buf = unsafe { sys::TSIOBufferCreate() };
    // SAFETY: live buffer.
    let reader = unsafe { sys::TSIOBufferReaderAlloc(buf) };
    let inner = Box::new(Inner {
        reader,
        on_wake: Arc::new(on_wake),
    });
    // SAFETY: live continuation and connection; the box is never reclaimed
    // (the channel lives as long as the process). The mutex is held while
    // the read starts, so the handler cannot run before it is set up.
    unsafe {
        sys::TSContDataSet(cont, Box::into_raw(inner).cast());
        sys::TSMutexLock(mutex);
        sys::TSVConnRead(vc, cont, buf, i64::MAX);
        sys::TSMutexUnlock(mutex);
    }
    Ok(Waker { fd: Arc::new(ours) })
}

unsafe extern "C" fn wake_handler(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    // SAFETY: the data is the Inner leaked in `start`, never freed.
    let inner = unsafe { &*(sys::TSContDataGet(cont) as *const Inner) };
    if ev == sys::TSEvent::TS_EVENT_VCONN_READ_READY {
        // SAFETY: live reader of this connection's buffer, under its mutex.
        unsafe {
            let n = sys::TSIOBufferReaderAvail(inner.reader);
            sys::TSIOBufferReaderConsume(inner.reader, n);
        }
        // SAFETY: for READ_READY the event data is the read VIO.
        unsafe { sys::TSVIOReenable(edata as sys::TSVIO) };
        // As an event of its own on this thread, not inside the connection's
        // I/O callback: there ATS holds the net handler's locks, and a
        // transaction resumed inline found them taken and retried 10 ms
        // later (measured: 1 decision in 10 took ~10 ms more).
        let f = inner.on_wake.clone();
        let here = crate::EventThread::current();
        let sent = here.map(|t| crate::sched::run_on(t, move || f()));
        if !matches!(sent, Some(Ok(()))) {
            guard::catch("wake", || (), || (inner.on_wake)());
        }
    } else {
        crate::log::error(&format!(
            "wake channel ended (event {}): falling back to timers",
            ev.0
        ));
    }
    0
}
