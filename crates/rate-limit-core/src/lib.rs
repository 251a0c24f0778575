//! The pure logic of rate_limit.so, testable without Traffic Server: option
//! parsing, admission decisions (built on the `limits` primitives: GCRA
//! bucket, FIFO slots, queue budget; injected clock), metric names, and
//! RateLimit header values.

#![forbid(unsafe_code)]

pub mod admission;
pub mod ctl;
pub mod enforce;
pub mod fair;
pub mod headers;
pub mod key;
pub mod mates;
pub mod options;
pub mod peering;
pub mod refusal_log;
pub mod registry;
pub mod session;
pub mod status;
pub mod store;
pub mod tag;

pub use admission::{
    Admission, Counted, FairLimiter, Flow, Key, KeyUsage, KeyedLimiter, Limiter, Limits, RateToken,
    Refused, RuleLimiter, Shaped, SlotWait, Usage, Wait,
};
pub use admission::{AutoState, Outcome};
pub use options::{OptionError, Options};

/// The metrics of one rule, as upstream names them plus ours.
pub const METRICS: &[&str] = &[
    "queued",
    "rejected",
    "expired",
    "resumed",
    "admitted",
    "active",
    "waiting",
    "keys",
    "evicted",
    "status_charged",
    "flows",
    "borrowed",
    "flow_rejected",
    "dry_run_refused",
    "dry_run_queued",
    "exempt",
    "blocks",
    "blocked",
    "limit",
    "rtt_baseline_us",
    "rtt_recent_us",
];

/// `<prefix>.remap.<tag>.<metric>`, upstream's naming for remap rules.
pub fn metric_name(prefix: &str, tag: &str, metric: &str) -> String {
    format!("{prefix}.remap.{tag}.{metric}")
}
