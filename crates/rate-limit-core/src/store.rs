//! The store's options (`--store`, `--store-timeout`,
//! `--store-failure`, `--lease-ttl`): a rule's limits are decided in Redis,
//! exactly across every proxy that names the same store and namespace.

use limits::quote::quote;

use store_url::Target;
use store_url::UrlError;

use optspec::Opt;

use crate::options::common::{apply_given, invalid, uint, OptionError, Order};

pub mod ledger;

pub const MIN_SYNC_MS: u64 = 10;
pub const MAX_SYNC_MS: u64 = 60_000;

pub const DEFAULT_TIMEOUT_MS: u64 = 50;
pub const MAX_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_LEASE_TTL_S: u64 = 60;
pub const MAX_LEASE_TTL_S: u64 = 86_400;
/// Longest namespace (`--group`, or `--tag`) in a Redis key.
pub const MAX_NAMESPACE: usize = 64;

/// What a request gets when the store does not answer in time or fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Admitted.
    Open,
    /// Refused with the rule's `--error`.
    Closed,
    /// Decided by this proxy's own limiter (the rule's local limits).
    Local,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Open => "open",
            Failure::Closed => "closed",
            Failure::Local => "local",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// One server or a Redis Cluster.
    pub redis: Target,
    pub timeout_ms: u64,
    pub failure: Failure,
    pub lease_ttl_s: u64,
    /// `--store-sync`: decide locally and exchange counts through Redis
    /// every this many ms (the hybrid mode), instead of one decision per request.
    pub sync_ms: Option<u64>,
    /// Names the rule's keys: its `--group`, else its metric `--tag`.
    pub namespace: String,
}

impl StoreOptions {
    /// `redis://HOST:PORT/DB` or `redis+cluster://HOST:PORT,...`, normalised.
    pub fn url(&self) -> String {
        self.redis.url()
    }

    pub fn describe(&self) -> String {
        let mode = match self.sync_ms {
            Some(ms) => format!("sync every {ms}ms"),
            None => "exact".to_owned(),
        };
        format!(
            "{} {mode} timeout={}ms failure={} lease-ttl={}s namespace={}",
            self.url(),
            self.timeout_ms,
            self.failure.name(),
            self.lease_ttl_s,
            self.namespace
        )
    }
}

fn parse_url(value: &str) -> Result<Target, OptionError> {
    match store_url::redis(value) {
        Ok(t) => Ok(t),
        Err(UrlError::Invalid(allowed)) => Err(invalid("store", value, allowed)),
        Err(UrlError::Unsupported(why)) => Err(OptionError(format!(
            "--store has an unsupported value {}: {why}",
            quote(value)
        ))),
    }
}

/// The store options: the single source of their names. Their values are
/// checked in this order, whatever the order given.
pub static OPTIONS: &[Opt<Values, (), OptionError>] = &[
    Opt::value(
        "store",
        "the Redis server or cluster deciding the rule's limits",
        |s, v, _| {
            s.redis = Some(parse_url(v)?);
            Ok(())
        },
    ),
    Opt::value(
        "store-timeout",
        "longest wait for a Redis decision, ms",
        |s, v, _| {
            s.timeout_ms = uint("store-timeout", v, 1, MAX_TIMEOUT_MS, " (milliseconds)")?;
            Ok(())
        },
    ),
    Opt::value(
        "store-failure",
        "when Redis fails or is late: open, closed or local",
        |s, v, _| {
            s.failure = optspec::value::word(
                v,
                &[
                    ("local", Failure::Local),
                    ("open", Failure::Open),
                    ("closed", Failure::Closed),
                ],
            )
            .ok_or_else(|| invalid("store-failure", v, "open, closed or local"))?;
            Ok(())
        },
    ),
    Opt::value(
        "lease-ttl",
        "seconds before a dead proxy's concurrency leases expire",
        |s, v, _| {
            s.lease_ttl_s = uint("lease-ttl", v, 1, MAX_LEASE_TTL_S, " (seconds)")?;
            Ok(())
        },
    ),
    Opt::value(
        "store-sync",
        "the hybrid mode: exchange counts through Redis every this many ms",
        |s, v, _| {
            s.sync_ms = Some(uint(
                "store-sync",
                v,
                MIN_SYNC_MS,
                MAX_SYNC_MS,
                " (milliseconds)",
            )?);
            Ok(())
        },
    ),
];

/// The store options' values, before they are checked together.
pub struct Values {
    redis: Option<Target>,
    timeout_ms: u64,
    failure: Failure,
    lease_ttl_s: u64,
    sync_ms: Option<u64>,
}

/// What else the rule has, for the checks that combine options.
pub struct Context<'a> {
    pub group: Option<&'a str>,
    pub tag: &'a str,
    pub conntrack: bool,
    pub peered: bool,
    pub keyed: bool,
    pub rate: bool,
    pub limit: bool,
}

/// Validates the store options of a rule. `raw`: `(option, value)` as given.
pub fn parse(
    raw: &[(&'static str, String)],
    cx: Context<'_>,
) -> Result<Option<StoreOptions>, OptionError> {
    let Context {
        group,
        tag,
        conntrack,
        peered,
        ..
    } = cx;
    // Values first (each error names its own option), then what needs what.
    let mut given = Values {
        redis: None,
        timeout_ms: DEFAULT_TIMEOUT_MS,
        failure: Failure::Local,
        lease_ttl_s: DEFAULT_LEASE_TTL_S,
        sync_ms: None,
    };
    apply_given(OPTIONS, raw, Order::Table, &mut given, &())?;
    let Values {
        redis,
        timeout_ms,
        failure,
        lease_ttl_s,
        sync_ms,
    } = given;
    let Some(redis) = redis else {
        if let Some((name, _)) = raw.first() {
            return Err(OptionError(format!(
                "--{name} needs --store (it configures how Redis decides the rule)"
            )));
        }
        return Ok(None);
    };
    if conntrack {
        return Err(OptionError(
            "--store does not work with --conntrack: a lease belongs to a transaction".to_owned(),
        ));
    }
    if peered {
        return Err(OptionError(
            "--store and --peers exclude each other: the store is exact, the peer exchange approximate"
                .to_owned(),
        ));
    }
    if sync_ms.is_some() && !(cx.keyed && cx.rate) {
        return Err(OptionError(
            "--store-sync needs --key and --rate: it shares per-client rate counts".to_owned(),
        ));
    }
    if sync_ms.is_some() && cx.limit {
        return Err(OptionError(
            "--store-sync shares rates only: drop --limit, or drop --store-sync for exact \
             concurrency leases"
                .to_owned(),
        ));
    }
    let namespace = match group {
        Some(g) => g.to_owned(),
        None if tag.len() <= MAX_NAMESPACE && !tag.contains(['{', '}']) => tag.to_owned(),
        None => {
            return Err(OptionError(format!(
                "--store needs --group here: the metric tag {} cannot name Redis keys \
                 (at most {MAX_NAMESPACE} bytes, no braces)",
                quote(tag)
            )))
        }
    };
    Ok(Some(StoreOptions {
        redis,
        timeout_ms,
        failure,
        lease_ttl_s,
        sync_ms,
        namespace,
    }))
}

#[cfg(test)]
mod tests;
