//! Options of ip_throttle.so: every Perlbal Throttle tunable, as `@pparam`s
//! (`--name=value`) or as lines of a `--config=FILE` (same names, one per
//! line, `#` comments). Perlbal's defaults. A later value overrides an
//! earlier one, so `@pparam`s after `--config` override the file.
//!
//! Every error names the option first (and the file:line it came from),
//! then the value (short and printable, [`limits::quote`]), then what is
//! allowed: ATS keeps only about 1 KB of a diagnostic.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use forwarded::ForwardedHeader;
use ipnet::IpNet;
use limits::quote::{quote, shorten_to};
use limits::{Nanos, NANOS_PER_SEC};
use regex::bytes::Regex;
use store_url::{StoreUrl, UrlError};

pub use crate::events::{EventKind, LogEvents};
use crate::state::Params;
use crate::Files;

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
/// Most `--trusted-proxies` networks (each request's peer is checked
/// against them, and each forwarded hop while they are trusted).
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
    /// Peers whose forwarding header names the client (`--trusted-proxies`);
    /// empty: the peer is the client.
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

/// Option names, and whether each takes a value.
pub const OPTIONS: &[(&str, bool)] = &[
    ("initial-delay", true),
    ("max-delay", true),
    ("threshold", true),
    ("max-concurrent", true),
    ("ban-threshold", true),
    ("ban-expiration", true),
    ("path-regex", true),
    ("method-regex", true),
    ("allow-file", true),
    ("deny-file", true),
    ("default-action", true),
    ("deny-action", true),
    ("log-events", true),
    ("log-only", false),
    ("instance", true),
    ("keys", true),
    ("key-prefix", true),
    ("store", true),
    ("store-timeout", true),
    ("trusted-proxies", true),
    ("forwarded-header", true),
    ("config", true),
];

fn known() -> String {
    let v: Vec<String> = OPTIONS.iter().map(|(n, _)| format!("--{n}")).collect();
    v.join(", ")
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

/// Seconds as written (`3`, `0.25`, `1.5`): digits, an optional fraction of
/// at most 9 digits; exact in nanoseconds (no float rounding).
pub fn parse_seconds(v: &str) -> Option<Nanos> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty()
        || !digits(int)
        || !digits(frac)
        || frac.len() > 9
        || (v.contains('.') && frac.is_empty())
    {
        return None;
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut f: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        f *= 10;
    }
    whole.checked_mul(NANOS_PER_SEC)?.checked_add(f)
}

fn seconds(name: &str, v: &str, at: &At, min: Nanos, max_s: u64) -> Result<Nanos, String> {
    let allowed = || {
        let lo = if min == 0 { "0" } else { "more than 0" };
        format!("a number of seconds from {lo} to {max_s}, fractions allowed (e.g. 3 or 0.5)")
    };
    match parse_seconds(v) {
        Some(n) if n >= min && n <= max_s * NANOS_PER_SEC => Ok(n),
        _ => Err(invalid(name, v, at, &allowed())),
    }
}

fn uint(name: &str, v: &str, at: &At, min: u64, max: u64) -> Result<u64, String> {
    let allowed = || format!("an integer from {min} to {max}");
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(name, v, at, &allowed()));
    }
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(name, v, at, &allowed())),
    }
}

fn regex(name: &str, v: &str, at: &At) -> Result<Option<Regex>, String> {
    if v.is_empty() {
        // Perlbal: an empty regex means no restriction.
        return Ok(None);
    }
    if v.len() > MAX_REGEX_BYTES {
        return Err(invalid(
            name,
            v,
            at,
            &format!("a regular expression of at most {MAX_REGEX_BYTES} bytes"),
        ));
    }
    Regex::new(v).map(Some).map_err(|e| {
        let why = e.to_string();
        let last = why.lines().last().unwrap_or("").trim().to_owned();
        invalid(
            name,
            v,
            at,
            &format!("a regular expression (Rust regex syntax): {last}"),
        )
    })
}

/// Resolves a file name against the config dir (absolute names stay).
pub fn resolve(config_dir: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config_dir.join(p)
    }
}

impl Options {
    /// Parses a rule's `@pparam`s; `--config` files are read through `files`,
    /// relative to `config_dir`. List files are only named here: they are
    /// read by [`crate::lists::Lists::load`].
    pub fn parse(args: &[&str], config_dir: &Path, files: &dyn Files) -> Result<Options, String> {
        let mut o = Options::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i];
            i += 1;
            let Some(body) = arg.strip_prefix("--") else {
                return Err(format!(
                    "unexpected argument {}: options are --name=value; known options: {}",
                    quote(arg),
                    known()
                ));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let value = match (lookup(name), inline) {
                (None, _) => {
                    return Err(format!(
                        "unknown option {}; known options: {}",
                        quote(arg),
                        known()
                    ))
                }
                (Some(false), v) => v,
                (Some(true), Some(v)) => Some(v),
                (Some(true), None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(*v)
                    }
                    None => return Err(format!("--{name} needs a value (--{name}=VALUE)")),
                },
            };
            if name == "config" {
                o.config_file(value.unwrap_or(""), config_dir, files)?;
            } else {
                o.set(name, value, &At(None), config_dir)?;
            }
        }
        o.check()?;
        Ok(o)
    }

    fn config_file(
        &mut self,
        name: &str,
        config_dir: &Path,
        files: &dyn Files,
    ) -> Result<(), String> {
        if name.is_empty() {
            return Err(invalid("config", name, &At(None), "a file name"));
        }
        let path = resolve(config_dir, name);
        let shown = path.display().to_string();
        let text = files
            .read(&path, MAX_CONFIG_BYTES)
            .map_err(|e| format!("--config cannot read {}: {e}", shorten_to(&shown, 256)))?;
        for (n, line) in text.lines().enumerate() {
            let at = At(Some((shown.clone(), n + 1)));
            let line = strip_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let body = line.strip_prefix("--").unwrap_or(line);
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (body, None),
            };
            match lookup(name) {
                None => {
                    return Err(format!(
                        "unknown option {}{}; known options: {}",
                        quote(line),
                        at.suffix(),
                        known()
                    ))
                }
                Some(_) if name == "config" => {
                    return Err(format!(
                        "--config cannot be used inside a config file{}",
                        at.suffix()
                    ))
                }
                Some(true) if value.is_none() => {
                    return Err(format!(
                        "--{name} needs a value (name=VALUE){}",
                        at.suffix()
                    ))
                }
                Some(_) => self.set(name, value, &at, config_dir)?,
            }
        }
        Ok(())
    }

    /// Applies one option (`value` is `None` only for a flag without one).
    fn set(&mut self, name: &str, value: Option<&str>, at: &At, dir: &Path) -> Result<(), String> {
        let v = value.unwrap_or("");
        let p = &mut self.params;
        match name {
            "initial-delay" => p.initial_delay = seconds(name, v, at, 1, MAX_SECONDS)?,
            "max-delay" => p.max_delay = seconds(name, v, at, 1, MAX_SECONDS)?,
            "threshold" => p.threshold = seconds(name, v, at, 0, MAX_SECONDS)?,
            "ban-expiration" => p.ban_expiration = seconds(name, v, at, 1, MAX_BAN_SECONDS)?,
            "max-concurrent" => {
                p.max_concurrent = uint(name, v, at, 0, u64::from(u32::MAX))? as u32
            }
            "ban-threshold" => p.ban_threshold = uint(name, v, at, 0, u64::from(u32::MAX))? as u32,
            "path-regex" => self.path_regex = regex(name, v, at)?,
            "method-regex" => self.method_regex = regex(name, v, at)?,
            "allow-file" | "deny-file" => {
                let f = (!v.is_empty()).then(|| resolve(dir, v));
                if name == "allow-file" {
                    self.allow_file = f;
                } else {
                    self.deny_file = f;
                }
            }
            "default-action" => {
                self.default_action = match v {
                    "allow" => DefaultAction::Allow,
                    "throttle" => DefaultAction::Throttle,
                    _ => return Err(invalid(name, v, at, "allow or throttle")),
                }
            }
            "deny-action" => {
                self.deny_action = match v {
                    "deny" => DenyAction::Deny,
                    "throttle" => DenyAction::Throttle,
                    _ => return Err(invalid(name, v, at, "deny or throttle")),
                }
            }
            "log-events" => {
                self.log_events = LogEvents::parse(v).ok_or_else(|| {
                    invalid(
                        name,
                        v,
                        at,
                        "a comma-separated list of ban, unban, whitelisted, blacklisted, banned, \
                         concurrent, throttled, all, none",
                    )
                })?
            }
            "log-only" => {
                self.log_only = match value {
                    None | Some("true") | Some("1") | Some("yes") | Some("on") => true,
                    Some("false") | Some("0") | Some("no") | Some("off") => false,
                    Some(_) => {
                        return Err(invalid(
                            name,
                            v,
                            at,
                            "no value, or true/false (1/0, yes/no, on/off)",
                        ))
                    }
                }
            }
            "instance" => {
                if v.is_empty() || v.len() > 256 || !v.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(invalid(
                        name,
                        v,
                        at,
                        "a name of 1 to 256 printable characters without spaces",
                    ));
                }
                self.instance = v.to_owned();
            }
            "keys" => self.keys = uint(name, v, at, 1, MAX_KEYS)? as usize,
            "key-prefix" => {
                let parsed = v.split_once('/').and_then(|(a, b)| {
                    let (a, b) = (a.parse::<u8>().ok()?, b.parse::<u8>().ok()?);
                    (a <= 32 && b <= 128).then_some((a, b))
                });
                let (a, b) = parsed.ok_or_else(|| {
                    invalid(
                        name,
                        v,
                        at,
                        "IPv4/IPv6 prefix lengths, 0 to 32 / 0 to 128 (e.g. 32/64 or 24/48)",
                    )
                })?;
                self.v4_prefix = a;
                self.v6_prefix = b;
            }
            "store" => {
                self.store = Some(store_url::parse(v).map_err(|e| match e {
                    UrlError::Invalid(allowed) => invalid(name, v, at, allowed),
                    UrlError::Unsupported(why) => format!(
                        "--store has an unsupported value {}{}: {why}",
                        quote(v),
                        at.suffix()
                    ),
                })?)
            }
            "store-timeout" => self.store_timeout_ms = uint(name, v, at, 1, MAX_STORE_TIMEOUT_MS)?,
            "trusted-proxies" => {
                let nets = forwarded::parse_trusted(v).map_err(|why| {
                    invalid(
                        name,
                        v,
                        at,
                        &format!(
                            "IP addresses or CIDRs, comma-separated, at most {MAX_TRUSTED} (e.g. \
                             10.0.0.0/8,2001:db8::/32; {why})"
                        ),
                    )
                })?;
                if nets.len() > MAX_TRUSTED {
                    return Err(invalid(
                        name,
                        v,
                        at,
                        &format!("at most {MAX_TRUSTED} IP addresses or CIDRs"),
                    ));
                }
                self.trusted_proxies = nets;
            }
            "forwarded-header" => {
                self.forwarded_header = Some(
                    ForwardedHeader::parse(v)
                        .ok_or_else(|| invalid(name, v, at, "X-Forwarded-For or Forwarded"))?,
                )
            }
            // A flag given a value in a file, or a name `lookup` knows.
            _ => return Err(format!("unknown option --{name}{}", at.suffix())),
        }
        Ok(())
    }

    /// Checks that need several options.
    fn check(&self) -> Result<(), String> {
        if self.store.is_some() && !crate::shared::valid_instance(&self.instance) {
            return Err(format!(
                "--instance has an invalid value {} for a --store: allowed 1 to {} printable \
                 characters without spaces (it is part of the store's keys)",
                quote(&self.instance),
                crate::shared::MAX_INSTANCE
            ));
        }
        if self.forwarded_header.is_some() && self.trusted_proxies.is_empty() {
            return Err(
                "--forwarded-header needs --trusted-proxies: the header is read only from them"
                    .to_owned(),
            );
        }
        let p = &self.params;
        if p.max_delay < p.initial_delay {
            return Err(format!(
                "--max-delay has an invalid value '{}': allowed at least --initial-delay ({} s)",
                fmt_seconds(p.max_delay),
                fmt_seconds(p.initial_delay)
            ));
        }
        Ok(())
    }

    /// One line for diags.log.
    pub fn describe(&self) -> String {
        let p = &self.params;
        let re = |r: &Option<Regex>| {
            r.as_ref()
                .map_or("(any)".to_owned(), |r| r.as_str().to_owned())
        };
        let file = |f: &Option<PathBuf>| {
            f.as_ref()
                .map_or("none".to_owned(), |f| f.display().to_string())
        };
        let proxies = if self.trusted_proxies.is_empty() {
            String::new()
        } else {
            let nets: Vec<String> = self.trusted_proxies.iter().map(|n| n.to_string()).collect();
            format!(
                " trusted-proxies={} forwarded-header={}",
                nets.join(","),
                self.header().name()
            )
        };
        let store = match &self.store {
            Some(s) => format!(
                " store={} store-timeout={}ms",
                s.url(),
                self.store_timeout_ms
            ),
            None => String::new(),
        };
        format!(
            "initial-delay={} max-delay={} threshold={} max-concurrent={} ban-threshold={} \
             ban-expiration={} path-regex={} method-regex={} allow-file={} deny-file={} \
             default-action={:?} deny-action={:?} log-events={} log-only={} instance={} keys={} key-prefix={}/{}{proxies}{store}",
            fmt_seconds(p.initial_delay),
            fmt_seconds(p.max_delay),
            fmt_seconds(p.threshold),
            p.max_concurrent,
            p.ban_threshold,
            fmt_seconds(p.ban_expiration),
            re(&self.path_regex),
            re(&self.method_regex),
            file(&self.allow_file),
            file(&self.deny_file),
            self.default_action,
            self.deny_action,
            self.log_events.describe(),
            self.log_only,
            self.instance,
            self.keys,
            self.v4_prefix,
            self.v6_prefix
        )
    }
}

impl Options {
    /// The forwarding header the trusted proxies write.
    pub fn header(&self) -> ForwardedHeader {
        self.forwarded_header
            .unwrap_or(ForwardedHeader::XForwardedFor)
    }

    /// The client of a request from `peer` (the connection's address, or
    /// its PROXY protocol source): `peer`, unless it is a trusted proxy;
    /// then the right-most address of its forwarding header that is not a
    /// trusted proxy. `read` gives every field of a header name joined with
    /// ", "; it is called only for a trusted peer.
    pub fn client_ip(
        &self,
        peer: IpAddr,
        read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
    ) -> IpAddr {
        forwarded::client_ip(&self.trusted_proxies, self.header(), peer, read)
    }
}

fn lookup(name: &str) -> Option<bool> {
    OPTIONS.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// Nanoseconds as seconds with 3 decimals (`1.500`).
pub fn fmt_seconds(n: Nanos) -> String {
    let ms = n / 1_000_000;
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// A config line without its comment: `#` starts one at the start of the
/// line or after whitespace, so a regex value may hold `#` (`path-regex =
/// ^/a#b`), while `threshold = 3 # seconds` still ends at `3`.
pub(crate) fn strip_comment(line: &str) -> &str {
    let b = line.as_bytes();
    let at = (0..b.len()).find(|&i| b[i] == b'#' && (i == 0 || b[i - 1].is_ascii_whitespace()));
    at.map_or(line, |i| &line[..i])
}
