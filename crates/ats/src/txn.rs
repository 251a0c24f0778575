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
//!
//! - [`hook`]: a suspended hook and its resolution ([`Hook`], [`SsnHook`]);
//! - [`park`]: a transaction parked off its hook ([`Parked`], [`HomeTxn`]);
//! - `resume`: re-enabling, the fail-safe way and without recursion.
//!
//! The event threads a parked transaction returns to are [`crate::EventThread`].

use std::marker::PhantomData;
use std::net::IpAddr;
use std::ptr::NonNull;

use crate::hdr::Header;
use crate::sys;

mod hook;
mod park;
mod resume;

pub(crate) use hook::{hook_unresolved, HookTarget};
pub use hook::{Hook, SsnHook};
pub use park::{error_page, HomeTxn, Parked};

/// Proof that a hook was resolved; the only way to get one is to resolve a [`Hook`].
#[must_use = "a hook handler must return the Done of the hook it resolved"]
pub struct Done(());

impl Done {
    /// For the crate's other resolvable handles (connections at a TLS hook).
    pub(crate) fn new() -> Done {
        Done(())
    }
}

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
    pub(crate) fn to_sys(self) -> sys::TSHttpHookID {
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
    /// otherwise the remote address of the connection. 9.x's [`Txn::client_ip`] already is that
    /// (ATS replaces the remote address by the header's source); 10.x's is the header's
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
