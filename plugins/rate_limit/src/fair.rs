//! `--fair`: which flow a request belongs to.

use ats::{RemapRequest, Txn};
use rate_limit_core::fair::FlowSource;
use rate_limit_core::{FairLimiter, Flow};

use crate::client::{KeyView, KEY_BYTES};
use crate::queue::Queued;
use crate::rule::Rule;

impl Rule {
    /// The request's flow on the rule's fair limiter `l`: its session, or
    /// the value of its `--fair` source. Requests without one (no session,
    /// header missing) share the flow of the empty value.
    pub(crate) fn flow(
        &self,
        l: &FairLimiter<Queued>,
        txn: Txn<'_>,
        req: &RemapRequest<'_>,
    ) -> Flow {
        let source = self.opts.fair.as_ref().map(|f| &f.source);
        match source {
            None | Some(FlowSource::Session) => {
                let id = txn.ssn().map_or(0, |s| s.id());
                l.flow(&id.to_le_bytes())
            }
            Some(FlowSource::Key(spec)) => {
                let view = KeyView {
                    txn,
                    hdr: req.request_header(),
                    client: None,
                };
                KEY_BYTES.with(|buf| {
                    let mut buf = buf.borrow_mut();
                    if !spec.key(&view, &mut buf) {
                        buf.clear();
                    }
                    l.flow(&buf)
                })
            }
        }
    }
}
