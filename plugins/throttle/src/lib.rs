//! throttle.so (skeleton: loads and logs its options).
#![forbid(unsafe_code)]

use std::sync::Arc;

use ats::{RemapArgs, RemapPlugin, RemapRequest, RemapStatus, Txn};

struct Throttle;

impl RemapPlugin for Throttle {
    const NAME: &'static str = "throttle";

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        log::info!("rule {} options {:?}", args.from_url, args.options());
        Ok(Throttle)
    }

    fn do_remap(self: &Arc<Self>, _txn: Txn<'_>, _req: &mut RemapRequest<'_>) -> RemapStatus {
        RemapStatus::NoRemap
    }
}

ats::remap_plugin!(Throttle);
