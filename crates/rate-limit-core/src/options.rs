//! `@pparam` options of rate_limit.so.
//!
//! Syntax is upstream's (getopt_long): `--name=value`, or `--name` and the
//! value as the next `@pparam`. Unlike upstream (which ignores unknown
//! options and turns "abc" into 0), every option is validated: a mistake
//! fails the rule with a message naming the option first, then the value
//! (quoted by [`limits::quote::quote`]: short and printable), then what is
//! allowed.

use std::fmt;

use limits::quote::quote;

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
    pub limit: Option<u32>,
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
    pub tag: String,
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
    /// `--exempt`: clients never limited by this rule.
    pub exempt: Option<Exempt>,
    /// `--log`: the refusal log's name (`<logdir>/<name>.log`).
    pub log: Option<String>,
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
    pub trusted: Vec<ipnet::IpNet>,
    pub forwarded: crate::key::ForwardedHeader,
}

impl Exempt {
    /// The client's address as `--key=ip` finds it (through trusted proxies).
    pub fn client_ip(&self, req: &impl crate::key::RequestView) -> Option<std::net::IpAddr> {
        let peer = req.peer_ip()?;
        Some(forwarded::client_ip(
            &self.trusted,
            self.forwarded,
            peer,
            |name| req.header(name),
        ))
    }

    /// Whether the client `ip` is in an exempt network.
    pub fn covers(&self, ip: std::net::IpAddr) -> bool {
        forwarded::trusts(&self.nets, ip)
    }
}

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
    (1..=MAX_LOG_NAME_LEN).contains(&base.len())
        && !base.starts_with('.')
        && !lower.ends_with("_ctl")
        && !RESERVED_LOG_NAMES.contains(&lower.as_str())
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

const LOG_NAMES_ALLOWED: &str = "a name of 1-64 letters, digits, '.', '_', '-', not starting \
     with '.', not *_ctl, not diags, error, traffic, manager, squid, throttle, ip_throttle \
     (NAME.log in ATS's log dir)";

/// A rejected option: names it, then the value, then what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

// The option comes first: ATS keeps only ~1 KB of a diagnostic.
pub(crate) fn invalid(name: &str, value: &str, allowed: &str) -> OptionError {
    OptionError(format!(
        "--{name} has an invalid value {}: allowed {allowed}",
        quote(value)
    ))
}

const OPTIONS: &[(&str, bool)] = &[
    ("limit", true),
    ("queue", true),
    ("error", true),
    ("retry", true),
    ("header", true),
    ("maxage", true),
    ("prefix", true),
    ("tag", true),
    ("conntrack", false),
    ("rate", true),
    ("burst", true),
    ("ratelimit-headers", false),
    ("key", true),
    ("key-prefix", true),
    ("keys", true),
    ("key-missing", true),
    ("trusted-proxies", true),
    ("forwarded-header", true),
    ("group", true),
    ("peers", true),
    ("peer-group", true),
    ("peer-listen", true),
    ("peer-period", true),
    ("peer-secret-file", true),
    ("peer-max-tags", true),
    ("peer-allow", true),
    ("peer-interface", true),
    ("peer-max-senders", true),
    ("store", true),
    ("store-timeout", true),
    ("store-failure", true),
    ("lease-ttl", true),
    ("store-sync", true),
    ("fair", true),
    ("flow-slots", true),
    ("flow-over", true),
    ("strict", false),
    ("flow-weights", true),
    ("dry-run", false),
    ("exempt", true),
    ("log", true),
    ("count-status", true),
];

/// Longest `--group` name.
pub const MAX_GROUP_LEN: usize = 64;

/// Why a dry run is refused on an exact `--store` rule with `--count-status`
/// ([`Options::store_counts_status`]), at load and by `set dry_run=on`.
pub const DRY_STORE_WHY: &str = "Redis's verdict comes after the request went on, so no response \
     of a dry run is charged and the dry run could never show a refusal (dry-run the rule \
     without --store, or with --store-sync)";

fn allowed_names() -> String {
    OPTIONS
        .iter()
        .map(|(n, _)| format!("--{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses an unsigned decimal strictly: digits only (no sign, space or suffix).
fn parse_uint(name: &str, value: &str, min: u64, max: u64) -> Result<u64, OptionError> {
    let allowed = || format!("an integer from {min} to {max}");
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(name, value, &allowed()));
    }
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(invalid(name, value, &allowed())),
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Options {
    /// `--count-status` on a rule Redis decides (`--store` without
    /// `--store-sync`): a dry run of it is refused ([`DRY_STORE_WHY`]).
    pub fn store_counts_status(&self) -> bool {
        self.count_status.is_some() && self.store.as_ref().is_some_and(|s| s.sync_ms.is_none())
    }

    /// Parses the options of the rule mapping `from_url`.
    pub fn parse(from_url: &str, args: &[&str]) -> Result<Options, OptionError> {
        let mut seen: Vec<&'static str> = Vec::new();
        let mut limit = None;
        let mut queue = None;
        let mut o = Options {
            limit: None,
            queue: u32::MAX,
            error: DEFAULT_ERROR,
            retry: 0,
            header: None,
            maxage_ms: 0,
            prefix: DEFAULT_PREFIX.to_owned(),
            tag: String::new(),
            conntrack: false,
            rate: None,
            burst: 0,
            ratelimit_headers: false,
            key: None,
            keys: DEFAULT_KEYS,
            key_missing: crate::key::Missing::Shared,
            group: None,
            peer: None,
            store: None,
            fair: None,
            dry_run: false,
            exempt: None,
            log: None,
            count_status: None,
            warnings: Vec::new(),
        };
        let mut exempt = None;
        let mut fair_raw: Vec<(&'static str, String)> = Vec::new();
        let mut peer_raw: Vec<(&'static str, String)> = Vec::new();
        let mut store_raw: Vec<(&'static str, String)> = Vec::new();
        let mut burst = None;
        let mut tag = None;
        let (mut sources, mut prefix, mut trusted) = (None, None, None);
        let mut forwarded = crate::key::ForwardedHeader::XForwardedFor;
        let mut i = 0;
        while i < args.len() {
            let arg = args[i];
            i += 1;
            let Some(body) = arg.strip_prefix("--") else {
                return Err(OptionError(format!(
                    "unexpected argument {}: options are --name=value; known options: {}",
                    quote(arg),
                    allowed_names()
                )));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let Some(&(name, takes_value)) = OPTIONS.iter().find(|(n, _)| *n == name) else {
                return Err(OptionError(format!(
                    "unknown option {}; known options: {}",
                    quote(arg),
                    allowed_names()
                )));
            };
            if seen.contains(&name) {
                return Err(OptionError(format!("--{name} given more than once")));
            }
            seen.push(name);
            let value = match (takes_value, inline) {
                (false, None) => "",
                (false, Some(v)) => {
                    return Err(OptionError(format!(
                        "--{name} takes no value (got {})",
                        quote(v)
                    )));
                }
                (true, Some(v)) => v,
                (true, None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        v
                    }
                    None => {
                        return Err(OptionError(format!(
                            "--{name} needs a value (--{name}=VALUE)"
                        )))
                    }
                },
            };
            match name {
                "limit" => {
                    if value == "0" {
                        let e = invalid(name, value, "an integer from 1 to 4294967295");
                        return Err(OptionError(format!(
                            "{e}; upstream 9.2 treats 0 as 'reject everything' and 10.1 as \
                             'unlimited': omit --limit for no concurrency limit with --rate, or \
                             set --queue=0 and a small limit"
                        )));
                    }
                    limit = Some(parse_uint(name, value, 1, u64::from(u32::MAX))? as u32);
                }
                "queue" => queue = Some(parse_uint(name, value, 0, u64::from(u32::MAX))? as u32),
                "error" => o.error = parse_uint(name, value, 400, 599)? as u16,
                "retry" => o.retry = parse_uint(name, value, 0, u64::from(u32::MAX))? as u32,
                "maxage" => o.maxage_ms = parse_uint(name, value, 0, u64::from(u32::MAX))?,
                "burst" => burst = Some(parse_uint(name, value, 1, u64::from(u32::MAX))? as u32),
                "header" => {
                    let name_part = value.strip_prefix('@').unwrap_or(value);
                    if name_part.is_empty() || !name_part.bytes().all(is_tchar) {
                        return Err(invalid(
                            name,
                            value,
                            "an HTTP header name (optionally starting with '@')",
                        ));
                    }
                    o.header = Some(value.to_owned());
                }
                "prefix" | "tag" => {
                    if value.is_empty()
                        || !value
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\'')
                    {
                        return Err(invalid(
                            name,
                            value,
                            "a non-empty metric name part without spaces or quotes",
                        ));
                    }
                    if name == "prefix" {
                        o.prefix = value.to_owned();
                    } else {
                        tag = Some(value.to_owned());
                    }
                }
                "rate" => {
                    let allowed = "a number of requests per second greater than 0 and at most 1000000 (e.g. 50 or 0.5)";
                    let well_formed = !value.is_empty()
                        && value.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                        && value.bytes().filter(|&b| b == b'.').count() <= 1
                        && value.bytes().any(|b| b.is_ascii_digit());
                    match value.parse::<f64>() {
                        Ok(r) if well_formed && r > 0.0 && r <= MAX_RATE => o.rate = Some(r),
                        _ => return Err(invalid(name, value, allowed)),
                    }
                }
                "conntrack" => o.conntrack = true,
                "ratelimit-headers" => o.ratelimit_headers = true,
                "key" => {
                    let parsed = crate::key::KeySpec::parse_sources(value).map_err(|_| {
                        invalid(
                            name,
                            value,
                            "ip, header:NAME, cookie:NAME or query:NAME, comma-separated, each at most once",
                        )
                    })?;
                    sources = Some(parsed);
                }
                "key-prefix" => {
                    prefix = Some(crate::key::KeySpec::parse_prefix(value).ok_or_else(|| {
                        invalid(
                            name,
                            value,
                            "IPv4/IPv6 prefix lengths, 0 to 32 / 0 to 128 (e.g. 32/64 or 24/48)",
                        )
                    })?);
                }
                "keys" => o.keys = parse_uint(name, value, 1, MAX_KEYS)? as usize,
                "key-missing" => {
                    o.key_missing = crate::key::Missing::parse(value)
                        .ok_or_else(|| invalid(name, value, "shared, pass or refuse"))?;
                }
                "forwarded-header" => {
                    forwarded = crate::key::ForwardedHeader::parse(value)
                        .ok_or_else(|| invalid(name, value, "X-Forwarded-For or Forwarded"))?;
                }
                "trusted-proxies" => {
                    let parsed = crate::key::KeySpec::parse_trusted(value).map_err(|_| {
                        invalid(name, value, "IP addresses or CIDRs, comma-separated")
                    })?;
                    trusted = Some(parsed);
                }
                "group" => {
                    let ok = (1..=MAX_GROUP_LEN).contains(&value.len())
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                    if !ok {
                        return Err(invalid(
                            name,
                            value,
                            "a name of 1 to 64 letters, digits, '.', '_' or '-'",
                        ));
                    }
                    o.group = Some(value.to_owned());
                }
                "dry-run" => o.dry_run = true,
                "exempt" => {
                    let nets = forwarded::parse_trusted(value).map_err(|_| {
                        invalid(name, value, "IP addresses or CIDRs, comma-separated")
                    })?;
                    exempt = Some(nets);
                }
                "log" => {
                    let base = value.strip_suffix(".log").unwrap_or(value);
                    if !log_name_ok(base) {
                        return Err(invalid(name, value, LOG_NAMES_ALLOWED));
                    }
                    o.log = Some(base.to_owned());
                }
                "count-status" => {
                    o.count_status = Some(crate::status::StatusList::parse(value)?);
                }
                n if crate::peering::NAMES.contains(&n) => peer_raw.push((n, value.to_owned())),
                n if crate::store::NAMES.contains(&n) => store_raw.push((n, value.to_owned())),
                n if crate::fair::NAMES.contains(&n) => fair_raw.push((n, value.to_owned())),
                _ => unreachable!("every name in OPTIONS is handled"),
            }
        }
        // --rate alone limits only the rate; otherwise upstream 9.2's default limit applies.
        o.limit = match (limit, o.rate) {
            (Some(l), _) => Some(l),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_LIMIT),
        };
        if let Some(q) = queue {
            o.queue = q;
        }
        o.burst = match (burst, o.rate) {
            (Some(_), None) => {
                return Err(OptionError(
                    "--burst needs --rate (it sizes the rate bucket)".to_owned(),
                ));
            }
            (Some(b), Some(_)) => b,
            // Default: one second's worth, at least 1.
            (None, Some(r)) => (r.ceil() as u32).max(1),
            (None, None) => 0,
        };
        if let Some(r) = o.rate {
            // The bucket holds burst/rate seconds of debt in nanoseconds.
            if f64::from(o.burst) / r > MAX_BURST_SECONDS {
                return Err(OptionError(format!(
                    "--burst={} is too large for --rate={r}: a full bucket may hold at most {MAX_BURST_SECONDS} s of requests",
                    o.burst
                )));
            }
        }
        if o.count_status.is_some() {
            if o.rate.is_none() {
                return Err(OptionError(
                    "--count-status needs --rate (responses with a listed status charge the rate bucket)"
                        .to_owned(),
                ));
            }
            if o.conntrack {
                return Err(OptionError(
                    "--count-status cannot be combined with --conntrack (a connection's later \
                     requests pass unchecked, so their responses could not be held to the rate)"
                        .to_owned(),
                ));
            }
        }
        o.tag = match tag {
            Some(t) => t,
            None => crate::tag::from_url(from_url).ok_or_else(|| {
                OptionError(format!(
                    "--tag is needed: no metric tag can be derived from {}",
                    quote(from_url)
                ))
            })?,
        };
        match sources {
            Some(sources) => {
                let (v4_prefix, v6_prefix) = prefix.unwrap_or((32, 64));
                let has_ip = sources.contains(&crate::key::Source::Ip);
                // --exempt finds the client through them whatever the key.
                if trusted.is_some() && !has_ip && exempt.is_none() {
                    o.warnings
                        .push("--trusted-proxies has no effect without ip in --key".to_owned());
                }
                if prefix.is_some() && !has_ip {
                    o.warnings
                        .push("--key-prefix has no effect without ip in --key".to_owned());
                }
                if seen.contains(&"forwarded-header") && trusted.is_none() {
                    o.warnings.push(
                        "--forwarded-header has no effect without --trusted-proxies".to_owned(),
                    );
                }
                // One connection carries one address; a header, a cookie or a
                // forwarded address can change on every request of it, and
                // --conntrack lets a connection's later requests pass unchecked.
                if o.conntrack && (sources != [crate::key::Source::Ip] || trusted.is_some()) {
                    return Err(OptionError(
                        "--conntrack with --key works only with --key=ip and no --trusted-proxies: \
                         a connection's later requests pass unchecked, and other keys can change \
                         from one request to the next"
                            .to_owned(),
                    ));
                }
                o.key = Some(crate::key::KeySpec {
                    sources,
                    v4_prefix,
                    v6_prefix,
                    trusted: trusted.clone().unwrap_or_default(),
                    forwarded,
                });
            }
            None => {
                for other in [
                    "key-prefix",
                    "keys",
                    "key-missing",
                    "trusted-proxies",
                    "forwarded-header",
                ] {
                    // --exempt finds the client's address as --key=ip does.
                    let for_exempt = exempt.is_some()
                        && ["trusted-proxies", "forwarded-header"].contains(&other);
                    if seen.contains(&other) && !for_exempt {
                        return Err(OptionError(format!(
                            "--{other} needs --key (it configures per-client keys)"
                        )));
                    }
                }
                if exempt.is_some() && seen.contains(&"forwarded-header") && trusted.is_none() {
                    o.warnings.push(
                        "--forwarded-header has no effect without --trusted-proxies".to_owned(),
                    );
                }
            }
        }
        if let Some(nets) = exempt {
            o.exempt = Some(Exempt {
                nets,
                trusted: o.key.as_ref().map_or_else(
                    || trusted.clone().unwrap_or_default(),
                    |k| k.trusted.clone(),
                ),
                forwarded,
            });
        }
        o.peer = crate::peering::parse(
            &peer_raw,
            o.key.is_some(),
            o.rate.is_some(),
            o.group.as_deref(),
        )?;
        if !store_raw.is_empty() {
            o.store = crate::store::parse(
                &store_raw,
                crate::store::Context {
                    group: o.group.as_deref(),
                    tag: &o.tag,
                    conntrack: o.conntrack,
                    peered: o.peer.is_some(),
                    keyed: o.key.is_some(),
                    rate: o.rate.is_some(),
                    limit: limit.is_some(),
                },
            )?;
        }
        if o.dry_run && o.store_counts_status() {
            return Err(OptionError(format!(
                "--dry-run cannot be combined with --store and --count-status: {DRY_STORE_WHY}"
            )));
        }
        if o.store.is_some() && queue.is_some_and(|q| q > 0) {
            o.warnings.push(
                "with --store a request over the limit is refused at once (Redis keeps no queue): \
                 --queue and --maxage apply only when --store-failure=local falls back"
                    .to_owned(),
            );
        }
        if !fair_raw.is_empty() {
            o.fair = crate::fair::parse(&fair_raw, o.limit, o.key.is_some(), o.conntrack)?;
            if o.store.is_some() {
                // Redis decides a --store rule's slots; fair shares are this
                // host's hand-off order, which that rule never uses.
                return Err(OptionError(
                    "--fair cannot be combined with --store (Redis decides the rule's slots)"
                        .to_owned(),
                ));
            }
        }
        if o.queue == 0 {
            if o.maxage_ms > 0 {
                o.warnings
                    .push("--maxage has no effect with --queue=0".to_owned());
            }
            if o.header.is_some() {
                o.warnings
                    .push("--header has no effect with --queue=0".to_owned());
            }
        }
        Ok(o)
    }

    /// Max queue wait in nanoseconds, if bounded.
    pub fn maxage_nanos(&self) -> Option<u64> {
        (self.maxage_ms > 0).then(|| self.maxage_ms.saturating_mul(limits::NANOS_PER_MS))
    }

    /// The options that make up the limiter (rules of a group must agree on
    /// them), as `(option, value)` in a fixed order. The others (`--error`,
    /// `--retry`, `--header`, metrics, `--ratelimit-headers`) belong to each rule.
    pub fn limiter_options(&self) -> Vec<(&'static str, String)> {
        let none = || "none".to_owned();
        let key = self.key.as_ref();
        vec![
            ("limit", self.limit.map_or_else(none, |l| l.to_string())),
            ("rate", self.rate.map_or_else(none, |r| r.to_string())),
            ("burst", self.burst.to_string()),
            (
                "count-status",
                self.count_status.map_or_else(none, |c| c.describe()),
            ),
            ("queue", self.queue.to_string()),
            ("maxage", self.maxage_ms.to_string()),
            ("conntrack", self.conntrack.to_string()),
            ("key", key.map_or_else(none, |k| k.describe_sources())),
            (
                "key-prefix",
                key.map_or_else(none, |k| format!("{}/{}", k.v4_prefix, k.v6_prefix)),
            ),
            ("keys", key.map_or_else(none, |_| self.keys.to_string())),
            (
                "key-missing",
                key.map_or_else(none, |_| self.key_missing.name().to_owned()),
            ),
            (
                "trusted-proxies",
                key.map_or_else(none, |k| {
                    k.trusted
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "forwarded-header",
                key.map_or_else(none, |k| format!("{:?}", k.forwarded)),
            ),
            (
                "peers",
                self.peer.as_ref().map_or_else(none, |p| p.describe()),
            ),
            (
                "store",
                self.store.as_ref().map_or_else(none, |s| s.describe()),
            ),
            (
                "fair",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.describe_source()),
            ),
            (
                "flow-slots",
                self.fair.as_ref().map_or_else(none, |f| {
                    f.flow_slots
                        .map_or_else(|| "fair share".to_owned(), |n| n.to_string())
                }),
            ),
            (
                "flow-over",
                self.fair.as_ref().map_or_else(none, |f| {
                    match f.over {
                        crate::fair::Over::Reject => "reject",
                        crate::fair::Over::Wait => "wait",
                    }
                    .to_owned()
                }),
            ),
            (
                "strict",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.strict.to_string()),
            ),
            (
                "flow-weights",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.describe_weights()),
            ),
        ]
    }

    /// A one-line summary for the log.
    pub fn describe(&self) -> String {
        let limit = self.limit.map_or("none".to_owned(), |l| l.to_string());
        let rate = self.rate.map_or("none".to_owned(), |r| {
            let counted = self.count_status.map_or(String::new(), |c| {
                format!(" charged by responses {}", c.describe())
            });
            format!("{r}/s burst {}{counted}", self.burst)
        });
        let queue = if self.queue == u32::MAX {
            "unlimited".to_owned()
        } else {
            self.queue.to_string()
        };
        let key = match &self.key {
            None => String::new(),
            Some(k) => format!(
                " key={} per key (prefix {}/{}, {} trusted proxies, missing={}) keys={}",
                k.describe_sources(),
                k.v4_prefix,
                k.v6_prefix,
                k.trusted.len(),
                self.key_missing.name(),
                self.keys
            ),
        };
        let key = key
            + &self.fair.as_ref().map_or(String::new(), |f| {
                format!(
                    " fair={} flow-slots={} flow-over={} strict={} flow-weights={}",
                    f.describe_source(),
                    f.flow_slots
                        .map_or_else(|| "fair-share".to_owned(), |n| n.to_string()),
                    if f.over == crate::fair::Over::Reject {
                        "reject"
                    } else {
                        "wait"
                    },
                    f.strict,
                    f.describe_weights()
                )
            });
        format!(
            "limit={limit} rate={rate} queue={queue} maxage={}ms error={} retry={} conntrack={}{key}{} metrics={}.remap.{}",
            self.maxage_ms,
            self.error,
            self.retry,
            self.conntrack,
            self.group
                .as_ref()
                .map_or(String::new(), |g| format!(" group={g}"))
                + &self
                    .peer
                    .as_ref()
                    .map_or(String::new(), |p| format!(" peers={}", p.describe()))
                + &self
                    .store
                    .as_ref()
                    .map_or(String::new(), |s| format!(" store={}", s.describe()))
                + if self.dry_run { " dry-run" } else { "" }
                + &self.exempt.as_ref().map_or(String::new(), |e| {
                    format!(" exempt={} network(s)", e.nets.len())
                })
                + &self
                    .log
                    .as_ref()
                    .map_or(String::new(), |l| format!(" log={l}.log")),
            self.prefix,
            self.tag
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://cdn.example.com/";

    fn parse(args: &[&str]) -> Result<Options, OptionError> {
        Options::parse(URL, args)
    }

    fn err(args: &[&str]) -> String {
        parse(args).expect_err("must be rejected").0
    }

    #[test]
    fn every_module_option_is_a_known_option() {
        // The peer, store and fair options are validated in their modules;
        // the rule's parser must accept each of them first.
        let modules = [
            crate::peering::NAMES,
            crate::store::NAMES,
            crate::fair::NAMES,
        ];
        for name in modules.concat() {
            assert!(
                OPTIONS.iter().any(|(o, _)| *o == name),
                "--{name} is missing from OPTIONS"
            );
        }
    }

    #[test]
    fn defaults_match_upstream_9_2() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.limit, Some(100));
        assert_eq!(o.queue, u32::MAX);
        assert_eq!(o.error, 429);
        assert_eq!((o.retry, o.maxage_ms, o.header.as_deref()), (0, 0, None));
        assert_eq!(
            (o.prefix.as_str(), o.tag.as_str()),
            ("plugin.rate_limiter", "http.cdn.example.com")
        );
        assert!(!o.conntrack && o.rate.is_none() && !o.ratelimit_headers);
    }

    #[test]
    fn both_value_syntaxes_and_every_option() {
        let o = parse(&[
            "--limit=5",
            "--queue",
            "7",
            "--error=503",
            "--retry=3",
            "--header=@RateLimit-Delay",
            "--maxage",
            "250",
            "--prefix=my.rl",
            "--tag=edge",
            "--conntrack",
            "--rate=12.5",
            "--burst=20",
            "--ratelimit-headers",
        ])
        .unwrap();
        assert_eq!(o.limit, Some(5));
        assert_eq!(o.queue, 7);
        assert_eq!(o.error, 503);
        assert_eq!(o.retry, 3);
        assert_eq!(o.header.as_deref(), Some("@RateLimit-Delay"));
        assert_eq!(o.maxage_ms, 250);
        assert_eq!((o.prefix.as_str(), o.tag.as_str()), ("my.rl", "edge"));
        assert!(o.conntrack && o.ratelimit_headers);
        assert_eq!((o.rate, o.burst), (Some(12.5), 20));
    }

    #[test]
    fn rate_alone_has_no_concurrency_limit_and_a_one_second_burst() {
        let o = parse(&["--rate=10"]).unwrap();
        assert_eq!((o.limit, o.rate, o.burst), (None, Some(10.0), 10));
        assert_eq!(parse(&["--rate=0.5"]).unwrap().burst, 1);
        assert_eq!(parse(&["--rate=10", "--limit=3"]).unwrap().limit, Some(3));
    }

    #[test]
    fn errors_name_option_value_and_allowed() {
        assert_eq!(
            err(&["--limit=abc"]),
            "--limit has an invalid value 'abc': allowed an integer from 1 to 4294967295"
        );
        assert_eq!(
            err(&["--queue=-1"]),
            "--queue has an invalid value '-1': allowed an integer from 0 to 4294967295"
        );
        assert_eq!(
            err(&["--error=200"]),
            "--error has an invalid value '200': allowed an integer from 400 to 599"
        );
        assert_eq!(
            err(&["--limit=4294967296"]),
            "--limit has an invalid value '4294967296': allowed an integer from 1 to 4294967295"
        );
        assert!(err(&["--limit=0"]).starts_with(
            "--limit has an invalid value '0': allowed an integer from 1 to 4294967295; upstream"
        ));
        assert!(err(&["--rate=0"]).starts_with("--rate has an invalid value '0': allowed a number"));
        assert!(err(&["--rate=1e3"]).starts_with("--rate has an invalid value '1e3'"));
        assert!(
            err(&["--header=Bad Header"]).starts_with("--header has an invalid value 'Bad Header'")
        );
        assert!(err(&["--tag=a b"]).starts_with("--tag has an invalid value 'a b'"));
        assert!(err(&["--limits=5"])
            .starts_with("unknown option '--limits=5'; known options: --limit, --queue"));
        assert!(err(&["limit=5"]).starts_with("unexpected argument 'limit=5'"));
        assert_eq!(err(&["--limit"]), "--limit needs a value (--limit=VALUE)");
        assert_eq!(
            err(&["--limit=1", "--limit=2"]),
            "--limit given more than once"
        );
        assert_eq!(
            err(&["--conntrack=yes"]),
            "--conntrack takes no value (got 'yes')"
        );
        assert_eq!(
            err(&["--burst=5"]),
            "--burst needs --rate (it sizes the rate bucket)"
        );
        assert_eq!(
            err(&["--limit= 5"]),
            "--limit has an invalid value ' 5': allowed an integer from 1 to 4294967295"
        );
        assert_eq!(
            Options::parse("/relative", &[]).expect_err("no host").0,
            "--tag is needed: no metric tag can be derived from '/relative'"
        );
    }

    /// ATS keeps ~1 KB of a diagnostic: a long value must not push the
    /// option's name (or what is allowed) out of it.
    #[test]
    fn long_values_come_after_the_option_and_are_shortened() {
        let digits = "9".repeat(10240);
        assert_eq!(
            err(&[&format!("--limit={digits}")]),
            format!(
                "--limit has an invalid value '{}…' (10240 bytes): allowed an integer from 1 to 4294967295",
                "9".repeat(limits::quote::MAX_SHOWN_CHARS)
            )
        );
        let spaced = format!(" {}", "x".repeat(10240));
        for (name, takes_value) in OPTIONS {
            for value in [digits.as_str(), spaced.as_str()] {
                let arg = format!("--{name}={value}");
                let args: &[&str] = if *name == "burst" {
                    &["--rate=1", &arg]
                } else {
                    &[&arg]
                };
                let e = match parse(args) {
                    // 10 KB of digits is a valid header name, prefix and tag.
                    Ok(_) if value == digits && ["header", "prefix", "tag"].contains(name) => {
                        continue
                    }
                    Ok(o) => panic!("--{name} accepted: {o:?}"),
                    Err(e) => e.0,
                };
                assert!(e.starts_with(&format!("--{name} ")), "{e}");
                assert!(e.len() < 300, "{e}");
                if *takes_value {
                    let shortened = format!("…' ({} bytes): allowed ", value.len());
                    assert!(e.contains(&shortened), "{e}");
                } else {
                    assert!(e.contains("takes no value (got '"), "{e}");
                }
            }
        }
        let e = err(&[&format!("--{}", "x".repeat(10240))]);
        assert!(
            // The known options are listed; well within ATS's ~1 KB.
            e.starts_with("unknown option '--xxx") && e.len() < 768,
            "{e}"
        );
        let e = err(&[&digits]);
        assert!(
            e.starts_with("unexpected argument '999") && e.len() < 768,
            "{e}"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            err(&["--limit=1\u{1}"]),
            "--limit has an invalid value '1\\u{1}': allowed an integer from 1 to 4294967295"
        );
        assert!(err(&["--tag=a\nb"]).starts_with("--tag has an invalid value 'a\\nb': allowed"));
        assert!(err(&["--x\u{1b}"]).starts_with("unknown option '--x\\u{1b}'"));
    }

    #[test]
    fn warns_about_options_without_effect() {
        let o = parse(&["--queue=0", "--maxage=100", "--header=X-Delay"]).unwrap();
        assert_eq!(o.warnings.len(), 2);
    }

    proptest::proptest! {
        /// Any input either parses or yields an error naming an option or argument; never panics.
        #[test]
        fn never_panics(args in proptest::collection::vec("(--)?[a-z-]{0,12}(=[ -~]{0,12})?", 0..6)) {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            match Options::parse(URL, &refs) {
                Ok(o) => {
                    proptest::prop_assert!(o.limit.is_some() || o.rate.is_some());
                    proptest::prop_assert!(o.error >= 400 && o.error <= 599);
                }
                Err(e) => proptest::prop_assert!(e.0.contains("--") || e.0.contains("argument")),
            }
        }

        /// Whatever the input, an error is short, printable, and starts with
        /// the option it is about.
        #[test]
        fn errors_are_short_printable_and_name_the_option_first(
            i in 0..OPTIONS.len(),
            value in proptest::collection::vec(proptest::char::any(), 0..400),
        ) {
            let name = OPTIONS[i].0;
            let value: String = value.into_iter().collect();
            let arg = format!("--{name}={value}");
            if let Err(e) = Options::parse(URL, &[&arg]) {
                proptest::prop_assert!(!e.0.chars().any(char::is_control), "{:?}", e.0);
                proptest::prop_assert!(e.0.len() < 600, "{:?}", e.0);
                if name != "burst" {
                    proptest::prop_assert!(e.0.starts_with(&format!("--{name} ")), "{:?}", e.0);
                }
            }
        }

        /// Every valid integer round-trips.
        #[test]
        fn integers_round_trip(limit in 1u32.., queue: u32, maxage: u32) {
            let a = [format!("--limit={limit}"), format!("--queue={queue}"), format!("--maxage={maxage}")];
            let refs: Vec<&str> = a.iter().map(String::as_str).collect();
            let o = Options::parse(URL, &refs).unwrap();
            proptest::prop_assert_eq!((o.limit, o.queue, o.maxage_ms), (Some(limit), queue, u64::from(maxage)));
        }
    }

    #[test]
    fn count_status_needs_rate_and_not_conntrack() {
        let o = parse(&[
            "--rate=1",
            "--burst=5",
            "--key=ip",
            "--count-status=401,5xx",
        ])
        .unwrap();
        let c = o.count_status.unwrap();
        assert!(c.contains(401) && c.contains(503) && !c.contains(200) && !c.contains(403));
        assert!(o
            .describe()
            .contains("rate=1/s burst 5 charged by responses 401,500-599"));
        assert!(o
            .limiter_options()
            .contains(&("count-status", "401,500-599".to_owned())));
        assert_eq!(parse(&["--rate=1"]).unwrap().count_status, None);
        assert_eq!(
            err(&["--rate=1", "--count-status=6xx"]),
            format!(
                "--count-status has an invalid value '6xx': allowed {}",
                crate::status::ALLOWED
            )
        );
        assert_eq!(
            err(&["--count-status=401"]),
            "--count-status needs --rate (responses with a listed status charge the rate bucket)"
        );
        assert_eq!(
            err(&["--limit=5", "--count-status=401"]),
            "--count-status needs --rate (responses with a listed status charge the rate bucket)"
        );
        assert!(err(&["--rate=1", "--conntrack", "--count-status=401"])
            .starts_with("--count-status cannot be combined with --conntrack"));
        // With --limit it applies to the rate only: the limit still counts requests.
        let o = parse(&["--rate=1", "--limit=2", "--count-status=4xx"]).unwrap();
        assert_eq!((o.limit, o.rate, o.burst), (Some(2), Some(1.0), 1));
        assert!(o.count_status.is_some());
        // With a group, peers and the store, as with --rate alone.
        let o = parse(&[
            "--rate=1",
            "--key=ip",
            "--group=login",
            "--count-status=401",
        ])
        .unwrap();
        assert_eq!(o.group.as_deref(), Some("login"));
        let o = parse(&[
            "--rate=1",
            "--key=ip",
            "--group=login",
            "--peers=127.0.0.1:5000",
            "--peer-secret-file=/etc/trafficserver/peer.key",
            "--count-status=401",
        ])
        .unwrap();
        assert!(o.peer.is_some() && o.count_status.is_some());
        let o = parse(&[
            "--rate=1",
            "--key=ip",
            "--store=redis://127.0.0.1:6379",
            "--count-status=401",
        ])
        .unwrap();
        assert!(o.store.is_some() && o.count_status.is_some());
    }

    #[test]
    fn key_options_parse_and_need_key() {
        let o = parse(&["--rate=5", "--key=ip,header:X-User", "--keys=1000"]).unwrap();
        let k = o.key.as_ref().unwrap();
        assert_eq!(k.sources.len(), 2);
        assert_eq!((k.v4_prefix, k.v6_prefix), (32, 64));
        assert_eq!(o.keys, 1000);
        assert_eq!(o.key_missing, crate::key::Missing::Shared);
        let o = parse(&[
            "--key=ip",
            "--key-prefix=24/48",
            "--key-missing=refuse",
            "--trusted-proxies=10.0.0.0/8,::1",
        ])
        .unwrap();
        let k = o.key.as_ref().unwrap();
        assert_eq!((k.v4_prefix, k.v6_prefix), (24, 48));
        assert_eq!(k.trusted.len(), 2);
        assert_eq!(o.key_missing, crate::key::Missing::Refuse);
        assert!(o.describe().contains("key=ip per key (prefix 24/48"));
        assert_eq!(parse(&["--limit=1"]).unwrap().key, None);

        assert!(err(&["--key=ip,host"]).starts_with(
            "--key has an invalid value 'ip,host': allowed ip, header:NAME, cookie:NAME or query:NAME"
        ));
        assert!(err(&["--key=ip", "--key-prefix=40/64"])
            .starts_with("--key-prefix has an invalid value '40/64'"));
        assert!(err(&["--key=ip", "--keys=0"]).starts_with("--keys has an invalid value '0'"));
        assert!(err(&["--key=ip", "--key-missing=drop"]).starts_with(
            "--key-missing has an invalid value 'drop': allowed shared, pass or refuse"
        ));
        assert!(err(&["--key=ip", "--trusted-proxies=lb"]).starts_with(
            "--trusted-proxies has an invalid value 'lb': allowed IP addresses or CIDRs"
        ));
        for opt in [
            "--keys=5",
            "--key-prefix=24/48",
            "--key-missing=pass",
            "--trusted-proxies=::1",
        ] {
            assert!(err(&[opt]).contains("needs --key"), "{opt}");
        }
        let o = parse(&["--key=header:X-A", "--trusted-proxies=10.0.0.1"]).unwrap();
        assert_eq!(
            o.warnings,
            ["--trusted-proxies has no effect without ip in --key"]
        );
    }

    #[test]
    fn rollout_options_parse() {
        let o = parse(&[
            "--rate=5",
            "--dry-run",
            "--log=refusals",
            "--exempt=10.0.0.0/8, ::1",
        ])
        .unwrap();
        assert!(o.dry_run);
        assert_eq!(o.log.as_deref(), Some("refusals"));
        let e = o.exempt.as_ref().unwrap();
        assert_eq!(e.nets.len(), 2);
        assert!(e.covers("10.1.2.3".parse().unwrap()));
        assert!(e.covers("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!e.covers("11.0.0.1".parse().unwrap()));
        assert!(o
            .describe()
            .contains(" dry-run exempt=2 network(s) log=refusals.log"));
        // The .log suffix is optional.
        assert_eq!(parse(&["--log=rl.log"]).unwrap().log.as_deref(), Some("rl"));
        // Near a reserved name is fine.
        for ok in ["diags2", "ctl", "my_ctl_x", "squid-refusals", "rate_limit"] {
            assert_eq!(
                parse(&[&format!("--log={ok}")]).unwrap().log.as_deref(),
                Some(ok)
            );
        }
        let d = parse(&[]).unwrap();
        assert!(!d.dry_run && d.exempt.is_none() && d.log.is_none());
        // Per-rule options: a group's rules need not agree on them.
        assert_eq!(
            parse(&["--dry-run", "--exempt=::1", "--log=a"])
                .unwrap()
                .limiter_options(),
            d.limiter_options()
        );
    }

    #[test]
    fn rollout_option_errors() {
        assert_eq!(
            err(&["--exempt=10.0.0.0/33"]),
            "--exempt has an invalid value '10.0.0.0/33': allowed IP addresses or CIDRs, comma-separated"
        );
        assert_eq!(
            err(&["--exempt="]),
            "--exempt has an invalid value '': allowed IP addresses or CIDRs, comma-separated"
        );
        let allowed = format!("allowed {LOG_NAMES_ALLOWED}");
        assert!(allowed.contains("not *_ctl, not diags, error, traffic, manager, squid"));
        for bad in [
            "../x",
            "a b",
            "",
            ".hidden",
            "rate_limit_ctl",
            "throttle_ctl.log",
            ".log",
            "diags",
            "diags.log",
            "error",
            "traffic",
            "manager",
            "squid.log",
            "Squid",
            "throttle",
            "ip_throttle",
        ] {
            assert_eq!(
                err(&[&format!("--log={bad}")]),
                format!("--log has an invalid value {}: {allowed}", quote(bad))
            );
        }
        assert!(
            err(&[&format!("--log={}", "a".repeat(65))]).starts_with("--log has an invalid value")
        );
        assert_eq!(
            err(&["--dry-run=yes"]),
            "--dry-run takes no value (got 'yes')"
        );
    }

    #[test]
    fn exempt_follows_trusted_proxies_with_or_without_key() {
        // Without --key, --trusted-proxies and --forwarded-header serve --exempt.
        let o = parse(&[
            "--exempt=192.0.2.0/24",
            "--trusted-proxies=127.0.0.2",
            "--forwarded-header=Forwarded",
        ])
        .unwrap();
        let e = o.exempt.unwrap();
        assert_eq!(e.trusted.len(), 1);
        assert_eq!(e.forwarded, crate::key::ForwardedHeader::Forwarded);
        assert!(o.key.is_none() && o.warnings.is_empty());
        // With --key, the key's trusted proxies.
        let o = parse(&["--key=ip", "--exempt=::1", "--trusted-proxies=10.0.0.1"]).unwrap();
        assert_eq!(o.exempt.unwrap().trusted, o.key.unwrap().trusted);
        // With a key that is not ip they serve --exempt: no warning.
        let o = parse(&[
            "--key=header:X",
            "--exempt=192.0.2.0/24",
            "--trusted-proxies=10.0.0.1",
        ])
        .unwrap();
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
        assert_eq!(o.exempt.unwrap().trusted.len(), 1);
        // Still refused without either.
        assert_eq!(
            err(&["--trusted-proxies=10.0.0.1"]),
            "--trusted-proxies needs --key (it configures per-client keys)"
        );
        assert_eq!(
            parse(&["--exempt=::1", "--forwarded-header=Forwarded"])
                .unwrap()
                .warnings,
            ["--forwarded-header has no effect without --trusted-proxies"]
        );
    }

    #[test]
    fn dry_run_combinations() {
        // Decided here, at remap: a dry run works as it does alone.
        let fair = parse(&["--limit=4", "--fair=ip", "--dry-run"]).unwrap();
        assert!(fair.dry_run && fair.fair.is_some());
        let peers = parse(&[
            "--rate=5",
            "--key=ip",
            "--dry-run",
            "--peers=127.0.0.1:7000",
            "--peer-secret-file=peer.key",
            "--group=g",
        ]);
        assert!(
            peers.as_ref().is_ok_and(|o| o.dry_run && o.peer.is_some()),
            "{peers:?}"
        );
        // Decided in Redis after remap: the request does not wait for it
        // (the plugin counts the reply when it comes).
        for store in [
            &["--rate=5", "--dry-run", "--store=redis://127.0.0.1:6379"][..],
            &[
                "--rate=5",
                "--key=ip",
                "--dry-run",
                "--store=redis://127.0.0.1:6379",
                "--store-sync=100",
            ],
        ] {
            let o = parse(store).unwrap();
            assert!(
                o.dry_run && o.store.is_some() && o.warnings.is_empty(),
                "{o:?}"
            );
        }
        // With --count-status Redis's verdict comes too late for any charge:
        // such a dry run could show no refusal, so it is refused.
        let e = err(&[
            "--rate=5",
            "--count-status=401",
            "--dry-run",
            "--store=redis://127.0.0.1:6379",
        ]);
        assert!(
            e.starts_with("--dry-run cannot be combined with --store and --count-status: "),
            "{e}"
        );
        // Decided here with --store-sync (or without --dry-run): allowed.
        let sync = parse(&[
            "--rate=5",
            "--key=ip",
            "--count-status=401",
            "--dry-run",
            "--store=redis://127.0.0.1:6379",
            "--store-sync=100",
        ]);
        assert!(sync.is_ok_and(|o| o.dry_run), "--store-sync");
        assert!(
            parse(&["--rate=5", "--count-status=401", "--store=redis://h"])
                .is_ok_and(|o| o.store_counts_status())
        );
    }
}
