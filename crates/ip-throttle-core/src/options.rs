//! Options of ip_throttle.so: every Perlbal Throttle tunable, as `@pparam`s
//! (`--name=value`) or as lines of a `--config=FILE` (same names, one per
//! line, `#` comments). Perlbal's defaults. A later value overrides an
//! earlier one, so `@pparam`s after `--config` override the file.
//!
//! Every error names the option first (and the file:line it came from),
//! then the value (short and printable, [`limits::quote`]), then what is
//! allowed: ATS keeps only about 1 KB of a diagnostic.
//!
//! Here: the options, their defaults and errors. The table of their names
//! and values (the one option engine's, `optspec`) is `args.rs`, reading
//! the `@pparam`s and files `parse.rs`, how they combine `checks.rs`, the
//! options as text `describe.rs`.

mod args;
mod checks;
mod describe;
mod parse;

pub use args::parse_seconds;
pub use optspec::files::resolve;
#[cfg(test)]
pub(crate) use parse::{strip_comment, tables};

use std::net::IpAddr;
use std::path::PathBuf;

use forwarded::ForwardedHeader;
use ipnet::IpNet;
use limits::quote::{quote, shorten_to};
use limits::{Nanos, NANOS_PER_SEC};
use regex::bytes::Regex;
use store_url::StoreUrl;

pub use crate::events::{EventKind, LogEvents};
use crate::state::Params;

/// Perlbal's defaults (Throttle.pm 1.20).
pub const DEFAULT_INITIAL_DELAY: Nanos = 3 * NANOS_PER_SEC;
pub const DEFAULT_MAX_DELAY: Nanos = 300 * NANOS_PER_SEC;
pub const DEFAULT_THRESHOLD: Nanos = 60 * NANOS_PER_SEC;
pub const DEFAULT_MAX_CONCURRENT: u32 = 2;
/// 0: never ban (Perlbal bans only when `ban_threshold` is set).
pub const DEFAULT_BAN_THRESHOLD: u32 = 0;
pub const DEFAULT_BAN_EXPIRATION: Nanos = 60 * NANOS_PER_SEC;
pub const DEFAULT_INSTANCE: &str = "Throttle";
/// `--store-timeout` default and bounds, in ms.
pub const DEFAULT_STORE_TIMEOUT_MS: u64 = 50;
pub const MAX_STORE_TIMEOUT_MS: u64 = 10_000;

/// Per-IP states held at once unless `--keys` says otherwise (as rate_limit).
pub const DEFAULT_KEYS: usize = 100_000;
pub const MAX_KEYS: u64 = 16 << 20;
/// Longest delay, threshold or ban accepted: a day (a ban: a year).
pub const MAX_SECONDS: u64 = 86_400;
pub const MAX_BAN_SECONDS: u64 = 365 * 86_400;
/// Largest `--config` file and regex accepted.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
pub const MAX_REGEX_BYTES: usize = 4096;
/// Most `--trusted-proxies` networks (each request's remote address is
/// checked against them, and each forwarded hop while they are trusted).
pub const MAX_TRUSTED: usize = 64;

/// What happens to clients on neither list (`--default-action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultAction {
    Allow,
    Throttle,
}

/// What happens to deny-listed clients (`--deny-action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyAction {
    Deny,
    Throttle,
}

/// A rule's options, parsed.
#[derive(Clone, Debug)]
pub struct Options {
    pub params: Params,
    /// Only requests whose path (with its leading `/`, without the query)
    /// matches are throttled; `None`: all.
    pub path_regex: Option<Regex>,
    /// Only requests whose method matches are throttled; `None`: all.
    pub method_regex: Option<Regex>,
    /// List files, resolved against the config dir.
    pub allow_file: Option<PathBuf>,
    pub deny_file: Option<PathBuf>,
    pub default_action: DefaultAction,
    pub deny_action: DenyAction,
    pub log_events: LogEvents,
    pub log_only: bool,
    pub instance: String,
    /// Most per-IP states held (`--keys`); fixed for the rule's life.
    pub keys: usize,
    /// Prefix lengths addresses are aggregated to (`--key-prefix`).
    pub v4_prefix: u8,
    pub v6_prefix: u8,
    /// `--store=memcached://HOST:PORT,...` or `redis://HOST:PORT/DB`: where
    /// proxies of the same `--instance` share per-IP state.
    pub store: Option<StoreUrl>,
    /// `--store-timeout`: longest a request waits for the store, in ms.
    pub store_timeout_ms: u64,
    /// Remote addresses whose forwarding header names the client
    /// (`--trusted-proxies`); empty: the remote address is the client.
    pub trusted_proxies: Vec<IpNet>,
    /// The header they write (`--forwarded-header`); `None`: not given,
    /// `X-Forwarded-For`.
    pub forwarded_header: Option<ForwardedHeader>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            params: Params {
                initial_delay: DEFAULT_INITIAL_DELAY,
                max_delay: DEFAULT_MAX_DELAY,
                threshold: DEFAULT_THRESHOLD,
                max_concurrent: DEFAULT_MAX_CONCURRENT,
                ban_threshold: DEFAULT_BAN_THRESHOLD,
                ban_expiration: DEFAULT_BAN_EXPIRATION,
            },
            path_regex: None,
            method_regex: None,
            allow_file: None,
            deny_file: None,
            default_action: DefaultAction::Throttle,
            deny_action: DenyAction::Deny,
            log_events: LogEvents::ALL,
            log_only: false,
            instance: DEFAULT_INSTANCE.to_owned(),
            keys: DEFAULT_KEYS,
            v4_prefix: 32,
            v6_prefix: 64,
            store: None,
            store_timeout_ms: DEFAULT_STORE_TIMEOUT_MS,
            trusted_proxies: Vec::new(),
            forwarded_header: None,
        }
    }
}

/// A rule's options while they are read: the options so far, and the
/// `--config` file just named, read before the next option.
pub(super) struct Draft {
    o: Options,
    include: Option<String>,
}

/// Where an option came from, for messages: nothing for a `@pparam`,
/// ` (at FILE:LINE)` for a config file line.
#[derive(Clone)]
struct At(Option<(String, usize)>);

impl At {
    fn suffix(&self) -> String {
        match &self.0 {
            None => String::new(),
            Some((f, l)) => format!(" (at {}:{l})", shorten_to(f, 256)),
        }
    }
}

fn invalid(name: &str, value: &str, at: &At, allowed: &str) -> String {
    format!(
        "--{name} has an invalid value {}{}: allowed {allowed}",
        quote(value),
        at.suffix()
    )
}

impl Options {
    /// The forwarding header the trusted proxies write.
    pub fn header(&self) -> ForwardedHeader {
        self.forwarded_header
            .unwrap_or(ForwardedHeader::XForwardedFor)
    }

    /// The client of a request from `remote` (the connection's address, or
    /// its PROXY protocol source): `remote`, unless it is a trusted proxy;
    /// then the right-most address of its forwarding header that is not a
    /// trusted proxy, or [`Client::Unknown`] if the proxy does not name it
    /// (see [`forwarded::client_ip`]). `read` gives every field of a header
    /// name joined with ", "; it is called only when `remote` is a trusted
    /// proxy.
    ///
    /// [`Client::Unknown`]: forwarded::Client::Unknown
    pub fn client_ip(
        &self,
        remote: IpAddr,
        read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
    ) -> forwarded::Client {
        forwarded::client_ip(&self.trusted_proxies, self.header(), remote, read)
    }
}

/// Nanoseconds as seconds with 3 decimals (`1.500`).
pub fn fmt_seconds(n: Nanos) -> String {
    let ms = n / 1_000_000;
    format!("{}.{:03}", ms / 1000, ms % 1000)
}
