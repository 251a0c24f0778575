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

    /// What the origin did for this transaction: `None` if no request was
    /// sent to it (a cache hit, a refusal, a client that left first); else
    /// its answer, timed from the request's first byte written to the
    /// response's first byte read (ATS's milestones: neither a queue before
    /// nor a slow client after counts), or no answer at all (a connection
    /// error, a timeout, a closed connection). Read it at TXN_CLOSE.
    pub fn origin_reply(self) -> Option<OriginReply> {
        let sent = self.milestone(sys::TSMilestonesType::TS_MILESTONE_SERVER_BEGIN_WRITE)?;
        let read = self.milestone(sys::TSMilestonesType::TS_MILESTONE_SERVER_FIRST_READ);
        Some(match (read, self.server_response_status()) {
            (Some(read), Some(status)) if read >= sent => OriginReply::Answered {
                rtt: Duration::from_nanos(read.abs_diff(sent)),
                status,
            },
            _ => OriginReply::NoAnswer,
        })
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
