//! Where the response a transaction sends came from: the origin, the
//! cache, or Traffic Server itself (its error pages, a refusal). rate_limit's
//! `--count-status` charges only responses the origin sent (now or, cached,
//! earlier), and `--limit=auto` learns from how long the origin took.

use std::time::Duration;

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

    /// What the origin did for this transaction, read at TXN_CLOSE: its
    /// answer, timed from the request's first byte written to the
    /// response's first byte read (ATS's milestones: neither a queue before
    /// nor a slow client after counts), or no answer (a connection that
    /// could not be made, or that ended before a response header). `None`
    /// when it teaches nothing of the origin: no connection was tried (a
    /// cache hit, a refusal), a tunnel (CONNECT, an upgrade: 101), a client
    /// that left first (9.2 cannot tell whose abort it was: any), or
    /// milestones out of order (a clock step, a blind tunnel rewriting
    /// them). On 9.2 milestones come from a clock cached per event loop
    /// turn (to ~10 ms): an RTT of 0 is possible.
    ///
    /// `want` is asked once the transaction is known to have tried the
    /// origin, before the costlier reads (its status): false skips them
    /// (`None`), so a caller that measures a share of its transactions pays
    /// one milestone read for the others, and for cache hits.
    pub fn origin_reply(self, want: impl FnOnce() -> bool) -> Option<OriginReply> {
        use sys::TSMilestonesType as M;
        let sent = self.milestone(M::TS_MILESTONE_SERVER_BEGIN_WRITE);
        if !(sent.is_some()
            || self
                .milestone(M::TS_MILESTONE_SERVER_FIRST_CONNECT)
                .is_some())
            || !want()
        {
            return None;
        }
        let Some(sent) = sent else {
            // Never written: a connection tried and failed is an answer of
            // sorts (the origin's refusal or silence).
            return (!self.client_aborted()).then_some(OriginReply::NoAnswer);
        };
        let read = self.milestone(M::TS_MILESTONE_SERVER_FIRST_READ);
        match (read, self.server_response_status()) {
            (_, Some(101)) => None,
            (Some(read), Some(status)) if read >= sent => Some(OriginReply::Answered {
                rtt: Duration::from_nanos(read.abs_diff(sent)),
                status,
            }),
            (Some(_), Some(_)) => None,
            _ if self.client_aborted() || self.is_connect() => None,
            _ => Some(OriginReply::NoAnswer),
        }
    }

    /// A CONNECT request (a tunnel: no response to time).
    fn is_connect(self) -> bool {
        self.client_request()
            .is_some_and(|h| h.method().eq_ignore_ascii_case(b"CONNECT"))
    }

    /// A milestone's time (ns), if it was reached.
    fn milestone(self, m: sys::TSMilestonesType) -> Option<i64> {
        let mut at: sys::TSHRTime = 0;
        // SAFETY: live txn; TSHttpTxnMilestoneGet writes `at` (0 for a
        // milestone not reached) or fails for an out-of-range milestone.
        let ok = unsafe { sys::TSHttpTxnMilestoneGet(self.as_ptr(), m, &mut at) };
        (ok == sys::TSReturnCode::TS_SUCCESS && at > 0).then_some(at)
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

/// What the origin did for a transaction ([`Txn::origin_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginReply {
    /// A response header came: its status, and the time from the request
    /// written to its first byte.
    Answered { rtt: Duration, status: u16 },
    /// The request was sent and no response header came.
    NoAnswer,
}

impl OriginReply {
    /// The response's time to first byte and status; `None` for no answer.
    pub fn response(self) -> Option<(Duration, u16)> {
        match self {
            OriginReply::Answered { rtt, status } => Some((rtt, status)),
            OriginReply::NoAnswer => None,
        }
    }
}
