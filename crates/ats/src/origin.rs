//! Where the response a transaction sends came from: the origin, the
//! cache, or Traffic Server itself (its error pages, a refusal). rate_limit's
//! `--count-status` charges only responses the origin sent (now or, cached,
//! earlier).

use crate::hdr::Header;
use crate::sys;
use crate::txn::{CacheLookup, Txn};

impl<'a> Txn<'a> {
    /// The status of the origin's response header, if one was received
    /// (`None` when ATS never read one: no connection, a timeout before the
    /// header, a refusal before the origin, a fresh cache hit).
    pub fn server_response_status(self) -> Option<u16> {
        // SAFETY: live txn; TSHttpTxnServerRespGet fills both outs from the
        // transaction's server response header or fails (TS_ERROR) when that
        // header was never created; the Header releases its loc on drop.
        let h = unsafe {
            Header::from_getter(|b, l| sys::TSHttpTxnServerRespGet(self.as_ptr(), b, l))
        }?;
        // The header exists as soon as ATS starts reading from the origin
        // (HttpSM::setup_server_read_response_header creates it empty, 9.2
        // and 10.1 alike), so an origin that took the request and never
        // answered leaves status 0: only a real status means one was read.
        Some(h.status()).filter(|s| (100..=599).contains(s))
    }

    /// Whether the response being sent is the origin's, now (a response
    /// header was read from it) or earlier (a fresh cache hit). False for
    /// responses Traffic Server made itself: error pages when the origin
    /// is unreachable or times out before its header, plugin refusals, and
    /// a stale object served because revalidation failed.
    pub fn response_from_origin(self) -> bool {
        self.server_response_status().is_some()
            || self.cache_lookup() == Some(CacheLookup::HitFresh)
    }
}
