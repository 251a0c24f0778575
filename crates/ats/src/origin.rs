//! Where the response a transaction sends came from: the origin, the
//! cache, or Traffic Server itself (its error pages, a refusal). rate_limit's
//! `--count-status` charges only responses the origin sent (now or, cached,
//! earlier), and `--limit=auto` learns from how long the origin took.

use crate::sys;
use crate::txn::{CacheLookup, Txn};

impl<'a> Txn<'a> {
    /// The status of the origin's response header, if one was received
    /// (`None` when ATS never read one: no connection, a timeout before the
    /// header, a refusal before the origin, a fresh cache hit).
    pub fn server_response_status(self) -> Option<u16> {
        let mut buf: sys::TSMBuffer = std::ptr::null_mut();
        let mut loc: sys::TSMLoc = std::ptr::null_mut();
        // SAFETY: live txn; TSHttpTxnServerRespGet fills both outs from the
        // transaction's server response header or fails (TS_ERROR) when that
        // header was never created.
        let rc = unsafe { sys::TSHttpTxnServerRespGet(self.as_ptr(), &mut buf, &mut loc) };
        if rc != sys::TSReturnCode::TS_SUCCESS {
            return None;
        }
        // SAFETY: (buf, loc) is the transaction's live server response
        // header, just returned (on success ATS sets both from a valid
        // header: 9.2 and 10.1 alike). Not released: TSHandleMLocRelease
        // does nothing for a header's loc (it returns at once for
        // HDR_HEAP_OBJ_HTTP_HEADER: 9.2's binary, 10.1's InkAPI.cc), and
        // calling it cost ~28 instructions of --limit=auto's sample.
        let s = unsafe { sys::TSHttpHdrStatusGet(buf, loc) }.0;
        // The header exists as soon as ATS starts reading from the origin
        // (HttpSM::setup_server_read_response_header creates it empty, 9.2
        // and 10.1 alike), so an origin that took the request and never
        // answered leaves status 0: only a real status means one was read.
        if (100..=599).contains(&s) {
            u16::try_from(s).ok()
        } else {
            None
        }
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
    /// Cost: two milestone reads for a cache hit; for an answer, two
    /// milestones and the status (~75 instructions of TS API calls on
    /// 9.2). A caller that measures a share of its transactions decides
    /// before calling, for every transaction: whether one went to the
    /// origin is what costs.
    #[inline]
    pub fn origin_reply(self) -> Option<OriginReply> {
        use sys::TSMilestonesType as M;
        let sent = self.milestone(M::TS_MILESTONE_SERVER_BEGIN_WRITE);
        if sent == 0 {
            // Never written: no origin at all, or a connection tried that
            // failed (the origin's refusal or silence: an answer of sorts).
            return (self.milestone(M::TS_MILESTONE_SERVER_FIRST_CONNECT) != 0
                && !self.client_aborted())
            .then_some(OriginReply::NoAnswer);
        }
        match self.server_response_status() {
            Some(101) => return None,
            Some(status) => {
                // A header read means its first byte was: the milestone is set.
                let read = self.milestone(M::TS_MILESTONE_SERVER_FIRST_READ);
                if read >= sent {
                    return Some(OriginReply::Answered {
                        rtt_ns: read.abs_diff(sent),
                        status,
                    });
                }
                if read != 0 {
                    return None;
                }
            }
            None => {}
        }
        (!(self.client_aborted() || self.is_connect())).then_some(OriginReply::NoAnswer)
    }

    /// A CONNECT request (a tunnel: no response to time).
    fn is_connect(self) -> bool {
        self.client_request()
            .is_some_and(|h| h.method().eq_ignore_ascii_case(b"CONNECT"))
    }

    /// A milestone's time (ns), 0 if it was not reached.
    #[inline]
    fn milestone(self, m: sys::TSMilestonesType) -> i64 {
        let mut at: sys::TSHRTime = 0;
        // SAFETY: live txn; TSHttpTxnMilestoneGet writes `at` (0 for a
        // milestone not reached, -1 for one out of range).
        unsafe { sys::TSHttpTxnMilestoneGet(self.as_ptr(), m, &mut at) };
        at.max(0)
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
    /// written to its first byte, in nanoseconds (as the milestones; a
    /// `Duration` cost its caller ~15 instructions to make and undo).
    Answered { rtt_ns: u64, status: u16 },
    /// The request was sent and no response header came.
    NoAnswer,
}

impl OriginReply {
    /// The response's time to first byte (ns) and status; `None` for no
    /// answer.
    pub fn response(self) -> Option<(u64, u16)> {
        match self {
            OriginReply::Answered { rtt_ns, status } => Some((rtt_ns, status)),
            OriginReply::NoAnswer => None,
        }
    }
}
