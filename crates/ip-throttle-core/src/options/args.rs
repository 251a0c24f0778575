//! The options' table: each option's name, docs line and what its value
//! may be (the error naming what is allowed). The single source of the
//! names: the `@pparam`s, the `--config` lines and the known-options list
//! all read it.

use forwarded::ForwardedHeader;
use limits::quote::quote;
use limits::{Nanos, NANOS_PER_SEC};
use optspec::{value, Opt};
use regex::bytes::Regex;
use store_url::UrlError;

use super::{
    invalid, At, DefaultAction, DenyAction, Draft, LogEvents, MAX_BAN_SECONDS, MAX_KEYS,
    MAX_REGEX_BYTES, MAX_SECONDS, MAX_STORE_TIMEOUT_MS, MAX_TRUSTED,
};

/// The name of the include option, which a config file may not use.
pub(super) const CONFIG: &str = "config";

/// Seconds as written (`3`, `0.25`, `1.5`): digits, an optional fraction of
/// at most 9 digits; exact in nanoseconds (no float rounding).
pub fn parse_seconds(v: &str) -> Option<Nanos> {
    value::seconds(v).ok()
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
    value::uint(v, min, max)
        .map_err(|_| invalid(name, v, at, &format!("an integer from {min} to {max}")))
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

/// A list file's name, resolved against the config dir once parsed; empty: none.
fn list_file(v: &str) -> Option<std::path::PathBuf> {
    (!v.is_empty()).then(|| v.into())
}

type R = Result<(), String>;

/// Every option of a rule, in the order the known-options list gives them.
pub(super) static OPTIONS: &[Opt<Draft, At, String>] = &[
    Opt::value(
        "initial-delay",
        "first delay of a throttled IP, seconds",
        |d, v, at| {
            d.o.params.initial_delay = seconds("initial-delay", v, at, 1, MAX_SECONDS)?;
            Ok(())
        },
    ),
    Opt::value(
        "max-delay",
        "most a delay doubles to, seconds",
        |d, v, at| {
            d.o.params.max_delay = seconds("max-delay", v, at, 1, MAX_SECONDS)?;
            Ok(())
        },
    ),
    Opt::value(
        "threshold",
        "quiet time that returns probation to allowed, seconds",
        |d, v, at| {
            d.o.params.threshold = seconds("threshold", v, at, 0, MAX_SECONDS)?;
            Ok(())
        },
    ),
    Opt::value(
        "max-concurrent",
        "most requests of one IP delayed at once",
        |d, v, at| {
            d.o.params.max_concurrent =
                uint("max-concurrent", v, at, 0, u64::from(u32::MAX))? as u32;
            Ok(())
        },
    ),
    Opt::value(
        "ban-threshold",
        "violations beyond which an IP is banned",
        |d, v, at| {
            d.o.params.ban_threshold = uint("ban-threshold", v, at, 0, u64::from(u32::MAX))? as u32;
            Ok(())
        },
    ),
    Opt::value(
        "ban-expiration",
        "how long a ban lasts, seconds",
        |d, v, at| {
            d.o.params.ban_expiration = seconds("ban-expiration", v, at, 1, MAX_BAN_SECONDS)?;
            Ok(())
        },
    ),
    Opt::value(
        "path-regex",
        "only requests whose path matches are throttled",
        |d, v, at| {
            d.o.path_regex = regex("path-regex", v, at)?;
            Ok(())
        },
    ),
    Opt::value(
        "method-regex",
        "only requests whose method matches are throttled",
        |d, v, at| {
            d.o.method_regex = regex("method-regex", v, at)?;
            Ok(())
        },
    ),
    Opt::value("allow-file", "IPs and CIDRs never throttled", |d, v, _| {
        d.o.allow_file = list_file(v);
        Ok(())
    }),
    Opt::value(
        "deny-file",
        "IPs and CIDRs refused or throttled",
        |d, v, _| {
            d.o.deny_file = list_file(v);
            Ok(())
        },
    ),
    Opt::value(
        "default-action",
        "clients on neither list: throttle or allow",
        set_default_action,
    ),
    Opt::value(
        "deny-action",
        "deny-listed clients: deny or throttle",
        set_deny_action,
    ),
    Opt::value(
        "log-events",
        "events written to ip_throttle.log",
        set_log_events,
    ),
    Opt::flag_or_value(
        "log-only",
        "dry run: decide and log, act on nothing",
        set_log_only,
    ),
    Opt::value(
        "instance",
        "the throttler's name (shared with --store)",
        set_instance,
    ),
    Opt::value("keys", "most IPs whose state is kept", |d, v, at| {
        d.o.keys = uint("keys", v, at, 1, MAX_KEYS)? as usize;
        Ok(())
    }),
    Opt::value(
        "key-prefix",
        "IPs grouped by these prefix lengths (V4/V6)",
        set_key_prefix,
    ),
    Opt::value(
        "store",
        "share per-IP state through memcached or Redis",
        set_store,
    ),
    Opt::value(
        "store-timeout",
        "longest a request waits for the store, ms",
        |d, v, at| {
            d.o.store_timeout_ms = uint("store-timeout", v, at, 1, MAX_STORE_TIMEOUT_MS)?;
            Ok(())
        },
    ),
    Opt::value(
        "trusted-proxies",
        "remote addresses whose forwarding header names the client",
        set_trusted,
    ),
    Opt::value(
        "forwarded-header",
        "the header the trusted proxies write",
        |d, v, at| {
            let h = ForwardedHeader::parse(v).ok_or_else(|| {
                invalid("forwarded-header", v, at, "X-Forwarded-For or Forwarded")
            })?;
            d.o.forwarded_header = Some(h);
            Ok(())
        },
    ),
    Opt::value(CONFIG, "read options from a file", |d, v, at| {
        if v.is_empty() {
            return Err(invalid(CONFIG, v, at, "a file name"));
        }
        d.include = Some(v.to_owned());
        Ok(())
    }),
];

fn set_default_action(d: &mut Draft, v: &str, at: &At) -> R {
    let words = [
        ("allow", DefaultAction::Allow),
        ("throttle", DefaultAction::Throttle),
    ];
    d.o.default_action = value::word(v, &words)
        .ok_or_else(|| invalid("default-action", v, at, "allow or throttle"))?;
    Ok(())
}

fn set_deny_action(d: &mut Draft, v: &str, at: &At) -> R {
    let words = [
        ("deny", DenyAction::Deny),
        ("throttle", DenyAction::Throttle),
    ];
    d.o.deny_action =
        value::word(v, &words).ok_or_else(|| invalid("deny-action", v, at, "deny or throttle"))?;
    Ok(())
}

fn set_log_events(d: &mut Draft, v: &str, at: &At) -> R {
    d.o.log_events = LogEvents::parse(v).ok_or_else(|| {
        invalid(
            "log-events",
            v,
            at,
            "a comma-separated list of ban, unban, whitelisted, blacklisted, banned, \
             concurrent, throttled, all, none",
        )
    })?;
    Ok(())
}

fn set_log_only(d: &mut Draft, v: Option<&str>, at: &At) -> R {
    d.o.log_only = match v {
        None => true,
        Some(v) => value::bool_word(v).ok_or_else(|| {
            invalid(
                "log-only",
                v,
                at,
                "no value, or true/false (1/0, yes/no, on/off)",
            )
        })?,
    };
    Ok(())
}

fn set_instance(d: &mut Draft, v: &str, at: &At) -> R {
    if v.is_empty()
        || v.len() > 256
        || v.starts_with('-')
        || !v.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(
            "instance",
            v,
            at,
            "a name of 1 to 256 printable characters without spaces, not starting with '-'",
        ));
    }
    d.o.instance = v.to_owned();
    Ok(())
}

fn set_key_prefix(d: &mut Draft, v: &str, at: &At) -> R {
    let parsed = v.split_once('/').and_then(|(a, b)| {
        let (a, b) = (a.parse::<u8>().ok()?, b.parse::<u8>().ok()?);
        (a <= 32 && b <= 128).then_some((a, b))
    });
    let (a, b) = parsed.ok_or_else(|| {
        invalid(
            "key-prefix",
            v,
            at,
            "IPv4/IPv6 prefix lengths, 0 to 32 / 0 to 128 (e.g. 32/64 or 24/48)",
        )
    })?;
    d.o.v4_prefix = a;
    d.o.v6_prefix = b;
    Ok(())
}

fn set_store(d: &mut Draft, v: &str, at: &At) -> R {
    d.o.store = Some(store_url::parse(v).map_err(|e| match e {
        UrlError::Invalid(allowed) => invalid("store", v, at, allowed),
        UrlError::Unsupported(why) => format!(
            "--store has an unsupported value {}{}: {why}",
            quote(v),
            at.suffix()
        ),
    })?);
    Ok(())
}

fn set_trusted(d: &mut Draft, v: &str, at: &At) -> R {
    let name = "trusted-proxies";
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
    d.o.trusted_proxies = nets;
    Ok(())
}
