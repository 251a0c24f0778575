//! Transactions, sessions and the hooks that run on them.
//!
//! ATS suspends a transaction at every hook until the plugin re-enables it.
//! Forgetting to re-enable hangs the client; re-enabling twice corrupts the
//! state machine. So re-enabling is not a free function here: a hook
//! handler receives a [`Hook`] and must turn it into [`Done`] by calling
//! exactly one of [`Hook::resume`], [`Hook::error`] or [`Hook::park`]. If
//! the handler panics, the trampoline re-enables the transaction the
//! fail-safe way (an error answer before the response phase, continue after
//! it), once the guard has stopped the unwind.
//!
//! A parked transaction is a [`Parked`] token: it can be moved to another
//! thread (a queue, a timer) and is resolved later, but the transaction is
//! only ever read or changed on its own thread: [`Parked::on_home`] runs the
//! work there and hands it a [`HomeTxn`]. Dropping the token unresolved
//! answers the client with a 500 instead of leaving it hanging.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::ptr::NonNull;

use crate::hdr::Header;
use crate::sys;

/// A transaction handle, valid for the callback that received it (`'a`).
#[derive(Clone, Copy)]
pub struct Txn<'a> {
    ptr: NonNull<sys::tsapi_httptxn>,
    _life: PhantomData<&'a ()>,
}

/// A client session handle, valid for the callback that received it.
#[derive(Clone, Copy)]
pub struct Ssn<'a> {
    ptr: NonNull<sys::tsapi_httpssn>,
    _life: PhantomData<&'a ()>,
}

/// Hooks a plugin can add to a transaction (or, for the session ones, to a session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookId {
    ReadRequestHdr,
    PreRemap,
    PostRemap,
    OsDns,
    CacheLookupComplete,
    ReadCacheHdr,
    SendRequestHdr,
    ReadResponseHdr,
    SendResponseHdr,
    TxnClose,
    SsnClose,
}

impl HookId {
    fn to_sys(self) -> sys::TSHttpHookID {
        use sys::TSHttpHookID as H;
        match self {
            HookId::ReadRequestHdr => H::TS_HTTP_READ_REQUEST_HDR_HOOK,
            HookId::PreRemap => H::TS_HTTP_PRE_REMAP_HOOK,
            HookId::PostRemap => H::TS_HTTP_POST_REMAP_HOOK,
            HookId::OsDns => H::TS_HTTP_OS_DNS_HOOK,
            HookId::CacheLookupComplete => H::TS_HTTP_CACHE_LOOKUP_COMPLETE_HOOK,
            HookId::ReadCacheHdr => H::TS_HTTP_READ_CACHE_HDR_HOOK,
            HookId::SendRequestHdr => H::TS_HTTP_SEND_REQUEST_HDR_HOOK,
            HookId::ReadResponseHdr => H::TS_HTTP_READ_RESPONSE_HDR_HOOK,
            HookId::SendResponseHdr => H::TS_HTTP_SEND_RESPONSE_HDR_HOOK,
            HookId::TxnClose => H::TS_HTTP_TXN_CLOSE_HOOK,
            HookId::SsnClose => H::TS_HTTP_SSN_CLOSE_HOOK,
        }
    }

    /// The hook an event is delivered for, if it is a transaction/session hook event.
    pub(crate) fn from_event(ev: sys::TSEvent) -> Option<HookId> {
        use sys::TSEvent as E;
        Some(match ev {
            E::TS_EVENT_HTTP_READ_REQUEST_HDR => HookId::ReadRequestHdr,
            E::TS_EVENT_HTTP_PRE_REMAP => HookId::PreRemap,
            E::TS_EVENT_HTTP_POST_REMAP => HookId::PostRemap,
            E::TS_EVENT_HTTP_OS_DNS => HookId::OsDns,
            E::TS_EVENT_HTTP_CACHE_LOOKUP_COMPLETE => HookId::CacheLookupComplete,
            E::TS_EVENT_HTTP_READ_CACHE_HDR => HookId::ReadCacheHdr,
            E::TS_EVENT_HTTP_SEND_REQUEST_HDR => HookId::SendRequestHdr,
            E::TS_EVENT_HTTP_READ_RESPONSE_HDR => HookId::ReadResponseHdr,
            E::TS_EVENT_HTTP_SEND_RESPONSE_HDR => HookId::SendResponseHdr,
            E::TS_EVENT_HTTP_TXN_CLOSE => HookId::TxnClose,
            E::TS_EVENT_HTTP_SSN_CLOSE => HookId::SsnClose,
            _ => return None,
        })
    }

    /// True before ATS has started the response: an error answer is still possible.
    fn can_answer(self) -> bool {
        matches!(
            self,
            HookId::ReadRequestHdr
                | HookId::PreRemap
                | HookId::PostRemap
                | HookId::OsDns
                | HookId::CacheLookupComplete
                | HookId::ReadCacheHdr
                | HookId::SendRequestHdr
        )
    }
}

/// Result of the cache lookup, from `TS_HTTP_CACHE_LOOKUP_COMPLETE_HOOK` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLookup {
    Miss,
    HitStale,
    HitFresh,
    Skipped,
}

impl<'a> Txn<'a> {
    /// # Safety
    /// `ptr` must be a live transaction for `'a`.
    pub(crate) unsafe fn from_raw(ptr: sys::TSHttpTxn) -> Option<Txn<'a>> {
        NonNull::new(ptr).map(|ptr| Txn {
            ptr,
            _life: PhantomData,
        })
    }

    pub(crate) fn as_ptr(self) -> sys::TSHttpTxn {
        self.ptr.as_ptr()
    }

    /// Adds a transaction-local hook handled by `cont`.
    pub fn hook(self, id: HookId, cont: &crate::HookCont) {
        // SAFETY: live txn; the continuation lives for the whole .so lifetime.
        unsafe { sys::TSHttpTxnHookAdd(self.as_ptr(), id.to_sys(), cont.as_ptr()) }
    }

    /// Sets the status ATS answers with when the transaction is re-enabled with an error.
    pub fn set_status(self, status: u16) {
        // SAFETY: live txn; any integer is accepted by ATS as a status.
        unsafe { sys::TSHttpTxnStatusSet(self.as_ptr(), sys::TSHttpStatus(status.into())) }
    }

    /// The client session the transaction belongs to.
    pub fn ssn(self) -> Option<Ssn<'a>> {
        // SAFETY: live txn; the session outlives its transactions.
        let p = unsafe { sys::TSHttpTxnSsnGet(self.as_ptr()) };
        NonNull::new(p).map(|ptr| Ssn {
            ptr,
            _life: PhantomData,
        })
    }

    /// True for requests ATS or a plugin made itself (e.g. background fetches).
    pub fn is_internal(self) -> bool {
        // SAFETY: live txn.
        unsafe { sys::TSHttpTxnIsInternal(self.as_ptr()) != 0 }
    }

    /// True once ATS has noticed that the client went away.
    #[cfg(ats_9)]
    pub fn client_aborted(self) -> bool {
        // SAFETY: live txn.
        unsafe { sys::TSHttpTxnAborted(self.as_ptr()) == sys::TSReturnCode::TS_SUCCESS }
    }

    /// True once ATS has noticed that the client went away (10.x also
    /// reports server aborts through the same call; only the client's count).
    #[cfg(ats_10)]
    pub fn client_aborted(self) -> bool {
        let mut client = false;
        // SAFETY: live txn; valid out pointer.
        let rc = unsafe { sys::TSHttpTxnAborted(self.as_ptr(), &mut client) };
        rc == sys::TSReturnCode::TS_SUCCESS && client
    }

    /// The client socket's file descriptor. Only on the transaction's own
    /// thread: ATS reaches it through session objects that thread may free.
    fn client_fd(self) -> Option<std::ffi::c_int> {
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: live txn on its own thread (callers: hook handlers); valid out pointer.
        let rc = unsafe { sys::TSHttpTxnClientFdGet(self.as_ptr(), &mut fd) };
        (rc == sys::TSReturnCode::TS_SUCCESS && fd >= 0).then_some(fd)
    }

    /// Sets the body (and its content type) of the error response ATS sends
    /// when this transaction is re-enabled with an error from a hook (that
    /// path has no body-factory page).
    pub fn set_error_body(self, body: &str, mime: &str) {
        let path = c"ats-plugin";
        // SAFETY: ATS takes ownership of both buffers and frees them with
        // ats_free, so they are allocated with its allocator.
        unsafe {
            let buf = sys::_TSmalloc(body.len().max(1), path.as_ptr()).cast::<u8>();
            let mime_c = sys::_TSstrdup(mime.as_ptr().cast(), mime.len() as i64, path.as_ptr());
            if buf.is_null() || mime_c.is_null() {
                return;
            }
            std::ptr::copy_nonoverlapping(body.as_ptr(), buf, body.len());
            sys::TSHttpTxnErrorBodySet(self.as_ptr(), buf.cast(), body.len(), mime_c);
        }
    }

    /// ATS's numeric transaction id (unique within the process).
    pub fn id(self) -> u64 {
        // SAFETY: live txn.
        unsafe { sys::TSHttpTxnIdGet(self.as_ptr()) }
    }

    /// The client's IP address.
    pub fn client_ip(self) -> Option<IpAddr> {
        // SAFETY: live txn; ATS returns a pointer to a sockaddr it owns (or null).
        let sa = unsafe { sys::TSHttpTxnClientAddrGet(self.as_ptr()) };
        // SAFETY: the sockaddr stays valid for the transaction.
        unsafe { crate::net::ip_from_sockaddr(sa.cast()) }
    }

    /// The client's IP address as its connection names it: on a port with
    /// PROXY protocol (`:pp`), the source of the header ATS accepted;
    /// otherwise the socket peer. 9.x's [`Txn::client_ip`] already is that
    /// (ATS replaces the peer by the header's source); 10.x's is the header's
    /// source only on `pp-clnt` ports, so there the header is asked
    /// directly.
    pub fn connection_client_ip(self) -> Option<IpAddr> {
        #[cfg(ats_10)]
        if let Some(ip) = self.ssn().and_then(Ssn::proxy_protocol_source) {
            return Some(ip);
        }
        self.client_ip()
    }

    /// Result of the cache lookup; `None` before the lookup completed.
    pub fn cache_lookup(self) -> Option<CacheLookup> {
        let mut status: std::ffi::c_int = -1;
        // SAFETY: live txn; `status` is a valid out pointer.
        let rc = unsafe { sys::TSHttpTxnCacheLookupStatusGet(self.as_ptr(), &mut status) };
        if rc != sys::TSReturnCode::TS_SUCCESS {
            return None;
        }
        use sys::TSCacheLookupResult as R;
        match u32::try_from(status).ok().map(R) {
            Some(R::TS_CACHE_LOOKUP_MISS) => Some(CacheLookup::Miss),
            Some(R::TS_CACHE_LOOKUP_HIT_STALE) => Some(CacheLookup::HitStale),
            Some(R::TS_CACHE_LOOKUP_HIT_FRESH) => Some(CacheLookup::HitFresh),
            Some(R::TS_CACHE_LOOKUP_SKIPPED) => Some(CacheLookup::Skipped),
            _ => None,
        }
    }

    /// Overrides the cache lookup result (e.g. serve a stale hit as fresh).
    pub fn set_cache_lookup(self, to: CacheLookup) -> bool {
        use sys::TSCacheLookupResult as R;
        let v = match to {
            CacheLookup::Miss => R::TS_CACHE_LOOKUP_MISS,
            CacheLookup::HitStale => R::TS_CACHE_LOOKUP_HIT_STALE,
            CacheLookup::HitFresh => R::TS_CACHE_LOOKUP_HIT_FRESH,
            CacheLookup::Skipped => R::TS_CACHE_LOOKUP_SKIPPED,
        };
        // SAFETY: live txn; only valid during/after CACHE_LOOKUP_COMPLETE, which ATS checks.
        let rc =
            unsafe { sys::TSHttpTxnCacheLookupStatusSet(self.as_ptr(), v.0 as std::ffi::c_int) };
        rc == sys::TSReturnCode::TS_SUCCESS
    }

    /// Marks the response as not cacheable by ATS.
    pub fn set_response_uncacheable(self) {
        // SAFETY: live txn; a plain flag setter.
        unsafe {
            sys::TSHttpTxnCntlSet(
                self.as_ptr(),
                sys::TSHttpCntlType::TS_HTTP_CNTL_RESPONSE_CACHEABLE,
                false,
            );
        }
    }

    /// The client request header (modifiable).
    pub fn client_request(self) -> Option<Header<'a>> {
        // SAFETY: live txn; the getter fills both outs or fails.
        unsafe { Header::from_getter(|b, l| sys::TSHttpTxnClientReqGet(self.as_ptr(), b, l)) }
    }

    /// The response ATS is about to send to the client (from SEND_RESPONSE_HDR on).
    pub fn client_response(self) -> Option<Header<'a>> {
        // SAFETY: as above.
        unsafe { Header::from_getter(|b, l| sys::TSHttpTxnClientRespGet(self.as_ptr(), b, l)) }
    }

    /// The cached response header (after a cache hit). Read-only in ATS's eyes.
    pub fn cached_response(self) -> Option<Header<'a>> {
        // SAFETY: as above.
        unsafe { Header::from_getter(|b, l| sys::TSHttpTxnCachedRespGet(self.as_ptr(), b, l)) }
    }
}

impl<'a> Ssn<'a> {
    /// # Safety
    /// `ptr` must be a live session for `'a`.
    pub(crate) unsafe fn from_raw(ptr: sys::TSHttpSsn) -> Option<Ssn<'a>> {
        NonNull::new(ptr).map(|ptr| Ssn {
            ptr,
            _life: PhantomData,
        })
    }

    pub(crate) fn as_ptr(self) -> sys::TSHttpSsn {
        self.ptr.as_ptr()
    }

    /// Adds a session hook (e.g. [`HookId::SsnClose`]) handled by `cont`.
    pub fn hook(self, id: HookId, cont: &crate::HookCont) {
        // SAFETY: live session; continuation lives for the .so lifetime.
        unsafe { sys::TSHttpSsnHookAdd(self.as_ptr(), id.to_sys(), cont.as_ptr()) }
    }

    /// Number of transactions started on this session so far (1 for the first).
    pub fn transaction_count(self) -> i32 {
        // SAFETY: live session.
        unsafe { sys::TSHttpSsnTransactionCount(self.as_ptr()) }
    }

    /// ATS's numeric session id.
    pub fn id(self) -> i64 {
        // SAFETY: live session.
        unsafe { sys::TSHttpSsnIdGet(self.as_ptr()) }
    }

    /// The source address of the connection's PROXY protocol header, if
    /// ATS accepted one (`None` also for `PROXY UNKNOWN`/`LOCAL`).
    #[cfg(ats_10)]
    fn proxy_protocol_source(self) -> Option<IpAddr> {
        // SAFETY: live session; ATS returns its client vconn, or null (a
        // session without a network connection).
        let vc = unsafe { sys::TSHttpSsnClientVConnGet(self.as_ptr()) };
        if vc.is_null() {
            return None;
        }
        let key = u16::try_from(sys::TSVConnPPInfoKey::TS_PP_INFO_SRC_ADDR.0).ok()?;
        let mut value: *const std::ffi::c_char = std::ptr::null();
        let mut len: std::ffi::c_int = 0;
        // SAFETY: non-null vconn of a live session (TSVConnPPInfoGet does
        // not check it); valid out pointers. On success ATS points `value`
        // at the vconn's own sockaddr of `len` bytes.
        let rc = unsafe { sys::TSVConnPPInfoGet(vc, key, &mut value, &mut len) };
        if rc != sys::TSReturnCode::TS_SUCCESS {
            return None;
        }
        // SAFETY: ATS's sockaddr of `len` bytes, alive with the session.
        unsafe { crate::net::ip_from_sockaddr_len(value.cast(), len) }
    }
}

/// Proof that a hook was resolved; the only way to get one is to resolve a [`Hook`].
#[must_use = "a hook handler must return the Done of the hook it resolved"]
pub struct Done(());

/// A transaction suspended at a hook, to be resolved exactly once.
///
/// An unresolved hook (the handler panicked) is failed safe by the
/// trampoline that created it, after the guard has stopped the unwind.
pub struct Hook<'a> {
    txn: Txn<'a>,
    id: HookId,
    resolved: &'a Cell<bool>,
}

impl<'a> Hook<'a> {
    pub(crate) fn new(txn: Txn<'a>, id: HookId, resolved: &'a Cell<bool>) -> Self {
        Hook { txn, id, resolved }
    }

    /// The transaction, borrowed from the hook: nothing obtained through it
    /// outlives `resume`, which may run the rest of the transaction (up to
    /// TXN_CLOSE and the release of its state) before returning.
    pub fn txn(&self) -> Txn<'_> {
        self.txn
    }

    pub fn id(&self) -> HookId {
        self.id
    }

    /// Lets the transaction go on.
    pub fn resume(self) -> Done {
        self.resolved.set(true);
        reenable_now(self.txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
        Done(())
    }

    /// Answers the client with ATS's error page for `status` (the body factory
    /// template) and skips the origin. Only meaningful before the response phase.
    pub fn error(self, status: u16) -> Done {
        self.resolved.set(true);
        self.txn.set_status(status);
        reenable_now(self.txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_ERROR);
        Done(())
    }

    /// Leaves the transaction suspended; `keep` receives the token that
    /// resolves it later (typically by storing it in a queue). The token
    /// remembers this thread, the transaction's own, as its home.
    pub fn park(self, keep: impl FnOnce(Parked)) -> Done {
        let Some(home) = EventThread::current() else {
            // Hooks run on event threads; without one there is no way back.
            crate::log::error("cannot park a transaction off an event thread: answering 500");
            return self.error(500);
        };
        self.resolved.set(true);
        keep(Parked {
            txn: self.txn.ptr,
            home,
            // Read here, on the transaction's own thread (see `client_fd`).
            client_fd: self.txn.client_fd(),
            can_answer: self.id.can_answer(),
            resolved: false,
        });
        Done(())
    }
}

/// A session suspended at a session hook (e.g. SSN_CLOSE). Like [`Hook`],
/// an unresolved one is resumed by its trampoline after the guard.
pub struct SsnHook<'a> {
    ssn: Ssn<'a>,
    id: HookId,
    resolved: &'a Cell<bool>,
}

impl<'a> SsnHook<'a> {
    pub(crate) fn new(ssn: Ssn<'a>, id: HookId, resolved: &'a Cell<bool>) -> Self {
        SsnHook { ssn, id, resolved }
    }

    /// The session, borrowed from the hook: at SSN_CLOSE, `resume` frees the
    /// session and its state, so nothing read through it may outlive that.
    pub fn ssn(&self) -> Ssn<'_> {
        self.ssn
    }

    pub fn id(&self) -> HookId {
        self.id
    }

    pub fn resume(self) -> Done {
        self.resolved.set(true);
        // SAFETY: live session suspended at this hook, resolved once.
        unsafe { sys::TSHttpSsnReenable(self.ssn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE) };
        Done(())
    }
}

/// An ATS event thread, remembered to come back to it later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventThread(NonNull<sys::tsapi_event_thread>);

// SAFETY: an opaque handle to an EThread, which lives as long as the process;
// it is only compared and passed to TSContScheduleOnThread.
unsafe impl Send for EventThread {}
// SAFETY: see Send.
unsafe impl Sync for EventThread {}

impl EventThread {
    /// The event thread this code runs on; `None` off ATS's event threads.
    pub fn current() -> Option<EventThread> {
        // SAFETY: no preconditions; null off event threads.
        NonNull::new(unsafe { sys::TSEventThreadSelf() }).map(EventThread)
    }

    pub(crate) fn as_ptr(self) -> sys::TSEventThread {
        self.0.as_ptr()
    }
}

/// A transaction left suspended at a hook. `Send`: it may travel to any
/// thread (a queue, a timer), but the transaction itself is read and changed
/// only on its home thread, through [`Parked::on_home`]. Dropping it
/// unresolved fails the transaction safe (on its home thread, and never
/// while a panic unwinds).
pub struct Parked {
    txn: NonNull<sys::tsapi_httptxn>,
    home: EventThread,
    client_fd: Option<std::ffi::c_int>,
    can_answer: bool,
    resolved: bool,
}

// SAFETY: a parked transaction cannot close (ATS waits for our re-enable), so
// the pointer stays valid wherever the token goes; off its home thread the
// token only re-enables (documented and implemented in 9.2 InkAPI.cc to work
// from any thread) or schedules work onto the home thread.
unsafe impl Send for Parked {}

impl Parked {
    /// True if the client socket reached end-of-file or failed. While a
    /// transaction waits in a hook ATS does not watch plain HTTP/1.1 clients
    /// (it only half-closes on a FIN), so a queueing plugin asks this before
    /// giving it a slot. Callable from any thread: it reads the socket, not
    /// the transaction ([`HomeTxn::client_gone`] also asks ATS). A client
    /// that half-closes on purpose after sending its request is
    /// indistinguishable from one that left, and counts as gone.
    pub fn client_gone(&self) -> bool {
        let Some(fd) = self.client_fd else {
            return false;
        };
        let mut byte = 0u8;
        // SAFETY: recv on a plain int with a valid 1-byte buffer. If ATS has
        // closed the socket and the number was reused, the transaction is
        // already dead; MSG_PEEK neither consumes data nor blocks, so the only
        // cost is a wrong answer about a transaction that is ending anyway.
        let n = unsafe {
            libc::recv(
                fd,
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => true,
            n if n > 0 => false,
            _ => !matches!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN) | Some(libc::EINTR)
            ),
        }
    }

    /// The transaction's own thread.
    pub fn home(&self) -> EventThread {
        self.home
    }

    /// Runs `f` on the transaction's home thread: at once if this is it,
    /// else as an event scheduled there. `f` receives the only handle
    /// through which a parked transaction can be read or changed, and must
    /// resolve it.
    ///
    /// Scheduling needs an ATS thread: called from a thread the plugin
    /// started itself, `f` is dropped unrun and the transaction fails safe
    /// (an error answer without the rule's status). Such threads hand work
    /// to ATS threads through a queue instead.
    pub fn on_home(self, f: impl FnOnce(HomeTxn<'_>) -> Done + Send + 'static) {
        // Never inline while a panic unwinds (a slot released by a dropped
        // permit hands over here): the resume would run ATS's state machine
        // inside the unwind.
        if EventThread::current() == Some(self.home) && !std::thread::panicking() {
            let _done = f(HomeTxn {
                parked: self,
                _here: PhantomData,
            });
            return;
        }
        let home = self.home;
        let mut slot = Some((self, f));
        let sent = crate::sched::run_on(home, move || {
            if let Some((parked, f)) = slot.take() {
                let _done = f(HomeTxn {
                    parked,
                    _here: PhantomData,
                });
            }
        });
        if let Err(e) = sent {
            // The closure (and the token in it) came back dropped: the
            // token's Drop has failed the transaction safe.
            crate::log::error(&format!("cannot schedule onto a transaction's thread: {e}"));
        }
    }

    fn resolve(&mut self, ev: sys::TSEvent) {
        self.resolved = true;
        reenable_deferred(self.txn.as_ptr(), ev);
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if self.resolved {
            return;
        }
        self.resolved = true;
        let (txn, home, can_answer) = (SendTxn(self.txn), self.home, self.can_answer);
        crate::guard::defer(move || {
            let act = move || {
                fail_safe(
                    txn.ptr(),
                    can_answer,
                    "parked transaction dropped unresolved",
                )
            };
            if EventThread::current() == Some(home) {
                act();
            } else if let Err(e) = crate::sched::run_on(home, act) {
                // Not even a hop home: re-enabling (any thread) at least
                // lets the transaction end; its status cannot be set here.
                crate::log::error(&format!(
                    "parked transaction dropped unresolved off its thread ({e}): re-enabling"
                ));
                let ev = match can_answer {
                    true => sys::TSEvent::TS_EVENT_HTTP_ERROR,
                    false => sys::TSEvent::TS_EVENT_HTTP_CONTINUE,
                };
                reenable_deferred(txn.ptr().as_ptr(), ev);
            }
        });
    }
}

/// A transaction pointer moved into a fail-safe action; see `Parked`'s `Send`.
#[derive(Clone, Copy)]
struct SendTxn(NonNull<sys::tsapi_httptxn>);
// SAFETY: as for Parked: the transaction waits for this re-enable.
unsafe impl Send for SendTxn {}

impl SendTxn {
    // A method, so closures capture the whole (Send) wrapper, not its field.
    fn ptr(&self) -> NonNull<sys::tsapi_httptxn> {
        self.0
    }
}

/// A parked transaction on its home thread: the only way to read or change
/// it while it is parked. Not `Send`, and borrowed for the duration of the
/// [`Parked::on_home`] call, so it cannot leave that thread or call.
pub struct HomeTxn<'a> {
    parked: Parked,
    _here: PhantomData<(&'a (), *const ())>,
}

impl HomeTxn<'_> {
    /// The transaction, until it is resolved.
    pub fn txn(&self) -> Txn<'_> {
        Txn {
            ptr: self.parked.txn,
            _life: PhantomData,
        }
    }

    /// True if the client is gone: ATS flagged an abort, or its socket
    /// reached end-of-file or failed (see [`Parked::client_gone`]).
    pub fn client_gone(&self) -> bool {
        self.txn().client_aborted() || self.parked.client_gone()
    }

    /// Resumes the transaction.
    pub fn resume(mut self) -> Done {
        self.parked.resolve(sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
        Done(())
    }

    /// Answers with `status` (set a body with [`Txn::set_error_body`] first:
    /// from a hook ATS sends no body-factory page).
    pub fn fail(mut self, status: u16) -> Done {
        self.txn().set_status(status);
        self.parked.resolve(sys::TSEvent::TS_EVENT_HTTP_ERROR);
        Done(())
    }
}

/// A minimal HTML page for `status`, like ATS's body-factory pages: from a
/// hook ATS sends a bare status, so plugins that refuse a parked
/// transaction give it this body ([`Txn::set_error_body`]).
pub fn error_page(status: u16) -> String {
    let reason = match status {
        403 => "Forbidden",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Request Refused",
    };
    format!("<HTML>\n<HEAD>\n<TITLE>{reason}</TITLE>\n</HEAD>\n<BODY>\n<H1>{reason}</H1>\n<HR>\n</BODY>\n</HTML>\n")
}

/// Fails a suspended transaction safe. On its own thread only (it sets the status).
fn fail_safe(txn: NonNull<sys::tsapi_httptxn>, can_answer: bool, why: &str) {
    if can_answer {
        crate::log::error(&format!("{why}: answering 500"));
        // SAFETY: the transaction is suspended at a hook, so it is alive; we
        // are on its thread.
        unsafe { sys::TSHttpTxnStatusSet(txn.as_ptr(), sys::TSHttpStatus(500)) };
        reenable_deferred(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_ERROR);
    } else {
        crate::log::error(&format!("{why}: continuing"));
        reenable_deferred(txn.as_ptr(), sys::TSEvent::TS_EVENT_HTTP_CONTINUE);
    }
}

/// Fails a hook safe whose handler did not resolve it (it panicked, or
/// returned a `Done` it did not earn). Called by the trampoline after the guard.
pub(crate) fn hook_unresolved(txn: Txn<'_>, id: HookId) {
    fail_safe(txn.ptr, id.can_answer(), "hook handler did not complete");
}

fn reenable_now(txn: sys::TSHttpTxn, ev: sys::TSEvent) {
    // SAFETY: callers pass a transaction suspended at a hook and resolve it once.
    unsafe { sys::TSHttpTxnReenable(txn, ev) }
}

thread_local! {
    static RESUMING: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<VecDeque<(usize, sys::TSEvent)>> = const { RefCell::new(VecDeque::new()) };
}

/// Re-enables a transaction that is *not* the one whose hook we are in.
///
/// On the transaction's own thread `TSHttpTxnReenable` runs the state machine
/// synchronously, which can close that transaction and, through a slot
/// release, resume the next one, and so on: recursion as deep as a queue.
/// Nested calls on one thread are turned into a loop instead.
fn reenable_deferred(txn: sys::TSHttpTxn, ev: sys::TSEvent) {
    let queued = PENDING
        .try_with(|p| {
            p.try_borrow_mut()
                .map(|mut p| p.push_back((txn as usize, ev)))
                .is_ok()
        })
        .unwrap_or(false);
    if !queued {
        reenable_now(txn, ev);
        return;
    }
    if RESUMING.with(|r| r.replace(true)) {
        return; // an outer frame on this thread drains the list
    }
    // Cleared however this frame ends, so later resumes on this thread work.
    struct Draining;
    impl Drop for Draining {
        fn drop(&mut self) {
            let _ = RESUMING.try_with(|r| r.set(false));
        }
    }
    let _draining = Draining;
    loop {
        let next = PENDING.with(|p| p.borrow_mut().pop_front());
        match next {
            Some((t, e)) => reenable_now(t as sys::TSHttpTxn, e),
            None => break,
        }
    }
}

/// Decodes the `edata` of a hook event.
pub(crate) enum HookTarget<'a> {
    Txn(Txn<'a>, HookId),
    Ssn(Ssn<'a>, HookId),
}

impl HookTarget<'_> {
    /// # Safety
    /// `edata` must be the event data ATS passed with `ev` to a hook continuation.
    pub(crate) unsafe fn from_event<'a>(
        ev: sys::TSEvent,
        edata: *mut c_void,
    ) -> Option<HookTarget<'a>> {
        let id = HookId::from_event(ev)?;
        if id == HookId::SsnClose {
            // SAFETY: session hook events carry the session.
            unsafe { Ssn::from_raw(edata.cast()) }.map(|s| HookTarget::Ssn(s, id))
        } else {
            // SAFETY: transaction hook events carry the transaction.
            unsafe { Txn::from_raw(edata.cast()) }.map(|t| HookTarget::Txn(t, id))
        }
    }
}
