//! `@pparam` options of rate_limit.so.
//!
//! Syntax is upstream's (getopt_long): `--name=value`, or `--name` and the
//! value as the next `@pparam`. Unlike upstream (which ignores unknown
//! options and turns "abc" into 0), every option is validated: a mistake
//! fails the rule with a message naming the option first, then the value
//! (quoted by [`limits::quote::quote`]: short and printable), then what is
//! allowed.
//!
//! Here: the options, their errors and the tables they are looked up in
//! ([`tables`], `crates/optspec`). The rule's own table and reading each
//! option is `args.rs` (the peer, store and fair options are tables in
//! their modules), how they combine `checks.rs`, the options as text
//! `describe.rs`.

use optspec::Names;

/// Concurrency limit when neither `--limit` nor `--rate` is given (upstream 9.2).
pub const DEFAULT_LIMIT: u32 = 100;
pub const DEFAULT_ERROR: u16 = 429;
pub const DEFAULT_PREFIX: &str = "plugin.rate_limiter";
/// `--rate` accepts up to this many requests per second.
pub const MAX_RATE: f64 = 1_000_000.0;
/// `--burst / --rate` above this (a year) would overflow the bucket's clock.
pub const MAX_BURST_SECONDS: f64 = 365.0 * 86_400.0;
/// Keys a keyed rule holds at once unless `--keys` says otherwise.
pub const DEFAULT_KEYS: usize = 100_000;
/// Most `--keys`: 16 M keys is about 1 GB of state with `--limit`.
pub const MAX_KEYS: u64 = 16 << 20;

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Max active transactions (or connections with `conntrack`); `None` = no limit.
    /// With `--limit=auto`, the learned limit's starting value.
    pub limit: Option<u32>,
    /// `--limit=auto`: the limit is learned from the origin's latency,
    /// within these bounds (`--limit-min`, `--limit-max`).
    pub auto: Option<AutoLimit>,
    /// Max waiting transactions; 0 = reject at once.
    pub queue: u32,
    pub error: u16,
    /// Seconds for `Retry-After` on rejections; 0 = no header.
    pub retry: u32,
    /// Client request header that receives the queue delay in ms.
    pub header: Option<String>,
    /// Max time in queue, ms; 0 = no expiry.
    pub maxage_ms: u64,
    pub prefix: String,
    /// `--tag`: the rule's name in metric names and logs (DThrottle's "tag",
    /// a client identity, is another thing: see docs/architecture.md).
    pub metric_tag: String,
    pub conntrack: bool,
    /// Requests per second.
    pub rate: Option<f64>,
    /// Requests allowed at once from a full rate bucket.
    pub burst: u32,
    pub ratelimit_headers: bool,
    /// `--key`: limits apply per client key, as identified by this.
    pub key: Option<crate::key::KeySpec>,
    /// `--keys`: most keys held at once.
    pub keys: usize,
    /// `--key-missing`: requests without their key.
    pub key_missing: crate::key::Missing,
    /// `--group`: rules naming the same group share one limiter.
    pub group: Option<String>,
    /// `--peers`/`--peer-group` and the other `--peer-…` options: the
    /// limiter joins DThrottle's peer exchange (see `crate::peering`).
    pub peer: Option<crate::peering::PeerOptions>,
    /// `--store` and the other `--store-…`/`--lease-ttl` options: limits
    /// decided in Redis, fleet-wide (see `crate::store`).
    pub store: Option<crate::store::StoreOptions>,
    /// `--fair` and the `--flow-…` options: the limit's slots are shared
    /// fairly between flows (see `crate::fair`).
    pub fair: Option<crate::fair::FairOptions>,
    /// `--dry-run`: decide, count and log, but let every request through
    /// (the rule's starting value; `set` can change it live).
    pub dry_run: bool,
    /// `--enforce`: the share of clients (percent) refused for real; the
    /// others are a dry run (see `crate::enforce`). The rule's starting
    /// value; `set` can change it live.
    pub enforce: u8,
    /// `--exempt`: clients never limited by this rule.
    pub exempt: Option<Exempt>,
    /// `--log`: the refusal log's name (`<logdir>/<name>.log`).
    pub log: Option<String>,
    /// `--block`: seconds a key (or the rule) refused for its rate stays
    /// refused; 0: no block.
    pub block_s: u32,
    /// `--count-status`: the rate bucket is charged by responses with these
    /// statuses (at SEND_RESPONSE_HDR) and only checked when requests start.
    pub count_status: Option<crate::status::StatusList>,
    /// Accepted but probably unintended combinations, for the log.
    pub warnings: Vec<String>,
}

/// `--exempt`: networks whose clients the rule never limits, and how the
/// client's address is found (`--trusted-proxies`, `--forwarded-header`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exempt {
    pub nets: Vec<ipnet::IpNet>,
    /// How the client's address is found: as `--key=ip` finds it.
    pub proxies: crate::key::TrustedProxies,
}

impl Exempt {
    /// Whether the client `ip` is in an exempt network.
    pub fn covers(&self, ip: std::net::IpAddr) -> bool {
        forwarded::trusts(&self.nets, ip)
    }

    /// Whether `client` is exempt: an unknown one never is, whatever the
    /// networks (its proxy's may be among them).
    pub fn exempts(&self, client: forwarded::Client) -> bool {
        client.addr().is_some_and(|ip| self.covers(ip))
    }
}

/// Highest `--limit-max` (and `--limit-min`).
pub const MAX_AUTO_LIMIT: u32 = adaptive::Bounds::HIGHEST;

/// `--limit=auto`'s bounds.
pub use adaptive::Bounds as AutoLimit;

/// Longest `--block`: a day.
pub const MAX_BLOCK_SECONDS: u64 = 86_400;

/// Longest `--log` name.
pub const MAX_LOG_NAME_LEN: usize = 64;

/// Log names ATS writes in its log dir by default (9.2 and 10.1:
/// diags.log, error.log, traffic.out, 9.2's manager.log, logging.yaml's
/// squid.log) and this repository's other plugins (throttle.log,
/// ip_throttle.log); `*_ctl` are the `traffic_ctl plugin msg` answers.
/// Sharing one would mix lines or make ATS rename ours (`NAME_1.log`).
pub const RESERVED_LOG_NAMES: [&str; 7] = [
    "diags",
    "error",
    "traffic",
    "manager",
    "squid",
    "throttle",
    "ip_throttle",
];

/// A `--log` name that names nothing else's log.
fn log_name_ok(base: &str) -> bool {
    let lower = base.to_ascii_lowercase();
    // No '.': ATS adds `.log` only to a name without one (`a.b` would
    // write `a.b`, and `diags.log` as a name would be ATS's own diags.log).
    (1..=MAX_LOG_NAME_LEN).contains(&base.len())
        && !base.starts_with('-')
        && !lower.ends_with("_ctl")
        && !RESERVED_LOG_NAMES.contains(&lower.as_str())
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

const LOG_NAMES_ALLOWED: &str = "1-64 letters, digits, '_', '-', not starting \
     with '-', .log optional, not *_ctl, not diags, error, traffic, manager, squid, throttle, ip_throttle \
     (NAME.log in ATS's log dir)";

/// Every option of a rule, for the tokenizer and the list of known
/// options: the rule's own table (`args.rs`), then the peer exchange's, the
/// store's and fair shares', then the rollout options (each the single
/// source of its names).
pub fn tables() -> [&'static dyn Names; 5] {
    [
        &args::OPTIONS,
        &crate::peering::OPTIONS,
        &crate::store::OPTIONS,
        &crate::fair::OPTIONS,
        &args::ROLLOUT,
    ]
}

/// Where each table is in [`tables`].
const RULE: usize = 0;
const PEERS: usize = 1;
const STORE: usize = 2;
const FAIR: usize = 3;
const ROLLOUT_TABLE: usize = 4;

/// Longest `--group` name.
pub const MAX_GROUP_LEN: usize = 64;

/// Why a dry run is refused on an exact `--store` rule with `--count-status`
/// ([`Options::store_counts_status`]), at load and by `set dry_run=on`.
pub const DRY_STORE_WHY: &str = "Redis's verdict comes after the request went on, so no response \
     of a dry run is charged and the dry run could never show a refusal (dry-run the rule \
     without --store, or with --store-sync)";

impl Options {
    /// `--count-status` on a rule Redis decides (`--store` without
    /// `--store-sync`): a dry run of it is refused ([`DRY_STORE_WHY`]).
    pub fn store_counts_status(&self) -> bool {
        self.count_status.is_some() && self.store.as_ref().is_some_and(|s| s.sync_ms.is_none())
    }

    /// Parses the options of the rule mapping `from_url`: each option on its
    /// own (`args.rs`), then how they combine (`checks.rs`).
    pub fn parse(from_url: &str, args: &[&str]) -> Result<Options, OptionError> {
        // Filled in place: the options are large, and moved once.
        let mut given = args::Given::new();
        args::read(args, &mut given)?;
        checks::combine(from_url, given)
    }

    /// `--block`'s length in nanoseconds, if any.
    pub fn block_nanos(&self) -> Option<u64> {
        (self.block_s > 0).then(|| u64::from(self.block_s) * limits::NANOS_PER_SEC)
    }

    /// Max queue wait in nanoseconds, if bounded.
    pub fn maxage_nanos(&self) -> Option<u64> {
        (self.maxage_ms > 0).then(|| self.maxage_ms.saturating_mul(limits::NANOS_PER_MS))
    }
}

mod args;
mod checks;
pub(crate) mod common;
mod describe;
pub mod live;

pub use common::OptionError;
pub(crate) use common::{invalid, uint};

#[cfg(test)]
mod tests;
