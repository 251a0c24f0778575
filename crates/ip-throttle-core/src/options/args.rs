//! Each option's value: what it accepts and the error naming what is allowed.

use std::path::Path;

use forwarded::ForwardedHeader;
use limits::quote::quote;
use limits::{Nanos, NANOS_PER_SEC};
use regex::bytes::Regex;
use store_url::UrlError;

use super::{
    invalid, resolve, At, DefaultAction, DenyAction, LogEvents, Options, MAX_BAN_SECONDS, MAX_KEYS,
    MAX_REGEX_BYTES, MAX_SECONDS, MAX_STORE_TIMEOUT_MS, MAX_TRUSTED,
};

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

impl Options {
    /// Applies one option (`value` is `None` only for a flag without one).
    pub(super) fn set(
        &mut self,
        name: &str,
        value: Option<&str>,
        at: &At,
        dir: &Path,
    ) -> Result<(), String> {
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
}
