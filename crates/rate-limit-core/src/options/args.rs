//! Reading a rule's `@pparam`s one at a time: each option's syntax and
//! value, in the order given (the first mistake is the one reported). How
//! the options combine is checked after, in `checks.rs`.

use limits::quote::quote;

use super::{
    allowed_names, invalid, log_name_ok, OptionError, Options, DEFAULT_ERROR, DEFAULT_KEYS,
    DEFAULT_PREFIX, LOG_NAMES_ALLOWED, MAX_GROUP_LEN, MAX_KEYS, MAX_RATE, OPTIONS,
};

/// The options as given, each checked on its own; the rule-wide values are
/// already in `o`, the ones that depend on others wait here.
pub(super) struct Given {
    /// The options given, in order.
    pub seen: Vec<&'static str>,
    pub o: Options,
    pub limit: Option<u32>,
    pub queue: Option<u32>,
    pub burst: Option<u32>,
    pub tag: Option<String>,
    pub exempt: Option<Vec<ipnet::IpNet>>,
    /// The `--flow-…`, `--peer-…` and `--store-…` options, for their modules.
    pub fair_raw: Vec<(&'static str, String)>,
    pub peer_raw: Vec<(&'static str, String)>,
    pub store_raw: Vec<(&'static str, String)>,
    pub sources: Option<Vec<crate::key::Source>>,
    pub prefix: Option<(u8, u8)>,
    pub trusted: Option<Vec<ipnet::IpNet>>,
    pub forwarded: crate::key::ForwardedHeader,
}

/// Reads `args`: every option known, given once, with a valid value.
pub(super) fn read(args: &[&str]) -> Result<Given, OptionError> {
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
                let parsed = crate::key::KeySpec::parse_trusted(value)
                    .map_err(|_| invalid(name, value, "IP addresses or CIDRs, comma-separated"))?;
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
                let nets = forwarded::parse_trusted(value)
                    .map_err(|_| invalid(name, value, "IP addresses or CIDRs, comma-separated"))?;
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
    Ok(Given {
        seen,
        o,
        limit,
        queue,
        burst,
        tag,
        exempt,
        fair_raw,
        peer_raw,
        store_raw,
        sources,
        prefix,
        trusted,
        forwarded,
    })
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
