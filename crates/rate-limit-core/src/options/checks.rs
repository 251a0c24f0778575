//! How a rule's options combine: defaults that depend on other options,
//! options that need or exclude others (errors, in a fixed order), and
//! combinations without effect (warnings). The peer, store and fair options
//! are checked by their modules, given what they depend on.

use limits::quote::quote;

use super::args::Given;
use super::{
    AutoLimit, Exempt, OptionError, Options, DEFAULT_LIMIT, DRY_STORE_WHY, MAX_BURST_SECONDS,
};

/// The rule's options from those `read` for the rule mapping `from_url`.
pub(super) fn combine(from_url: &str, given: Given) -> Result<Options, OptionError> {
    let Given {
        seen,
        mut o,
        limit,
        auto,
        limit_min,
        limit_max,
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
    } = given;
    o.auto = auto_limit(auto, limit_min, limit_max)?;
    // --rate alone limits only the rate; otherwise upstream 9.2's default limit
    // applies. Learned (--limit=auto), it starts where the controller does.
    o.limit = match (limit, o.rate, &o.auto) {
        (_, _, Some(a)) => a.config().map(|c| c.initial),
        (Some(l), _, None) => Some(l),
        (None, Some(_), None) => None,
        (None, None, None) => Some(DEFAULT_LIMIT),
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
    o.metric_tag = match tag {
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
                o.warnings
                    .push("--forwarded-header has no effect without --trusted-proxies".to_owned());
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
                proxies: crate::key::TrustedProxies {
                    trusted: trusted.clone().unwrap_or_default(),
                    forwarded,
                },
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
                let for_exempt =
                    exempt.is_some() && ["trusted-proxies", "forwarded-header"].contains(&other);
                if seen.contains(&other) && !for_exempt {
                    return Err(OptionError(format!(
                        "--{other} needs --key (it configures per-client keys)"
                    )));
                }
            }
            if exempt.is_some() && seen.contains(&"forwarded-header") && trusted.is_none() {
                o.warnings
                    .push("--forwarded-header has no effect without --trusted-proxies".to_owned());
            }
        }
    }
    if let Some(nets) = exempt {
        // With --key, the key's proxies (the same options).
        let proxies = o.key.as_ref().map_or_else(
            || crate::key::TrustedProxies {
                trusted: trusted.clone().unwrap_or_default(),
                forwarded,
            },
            |k| k.proxies.clone(),
        );
        o.exempt = Some(Exempt { nets, proxies });
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
                tag: &o.metric_tag,
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
    if o.enforce < crate::enforce::ALL && o.store_counts_status() {
        return Err(OptionError(format!(
            "--enforce={} cannot be combined with --store and --count-status: the clients \
             left out are a dry run, and {DRY_STORE_WHY}",
            o.enforce
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
    if o.count_status.is_some() && o.limit.is_none() {
        // Every request in flight passes the check on one token and is
        // charged its own 1/rate: C at once lock the bucket for C/rate.
        o.warnings.push(
            "--count-status without --limit: N requests in flight at once all pass the check \
             and lock the bucket (the key's, or the whole rule's without --key) out for \
             N/rate, up to one day; add --limit (e.g. --limit=1 --queue=0 with --key)"
                .to_owned(),
        );
    }
    if o.block_s > 0 {
        block_fits(&o)?;
    }
    if o.auto.is_some() {
        auto_fits(&o)?;
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

/// `--block` starts when the rate refuses, in the state that decides: this
/// proxy's (told to `--peers` in the next report, stored in Redis for
/// `--store-sync`), or Redis's (exact `--store`).
fn block_fits(o: &Options) -> Result<(), OptionError> {
    let why = if o.rate.is_none() {
        "it needs --rate: a block starts when the rate refuses a client"
    } else {
        return Ok(());
    };
    Err(OptionError(format!("--block={}: {why}", o.block_s)))
}

/// `--limit=auto`'s bounds, checked: `--limit-min` and `--limit-max` only
/// with it, the lower not above the higher.
fn auto_limit(
    auto: bool,
    min: Option<u32>,
    max: Option<u32>,
) -> Result<Option<AutoLimit>, OptionError> {
    if !auto {
        return match (min, max) {
            (None, None) => Ok(None),
            (Some(_), _) => Err(OptionError(
                "--limit-min needs --limit=auto (it bounds the learned limit)".to_owned(),
            )),
            (None, Some(_)) => Err(OptionError(
                "--limit-max needs --limit=auto (it bounds the learned limit)".to_owned(),
            )),
        };
    }
    let a = AutoLimit::given(min, max);
    if a.min > a.max {
        return Err(OptionError(format!(
            "--limit-min={} is above --limit-max={}: the lowest learned limit must not \
             exceed the highest",
            a.min, a.max
        )));
    }
    Ok(Some(a))
}

/// `--limit=auto` learns the origin's capacity from the transactions that
/// hold this proxy's rule-wide slots.
fn auto_fits(o: &Options) -> Result<(), OptionError> {
    let why = if o.key.is_some() {
        "--key: the learned limit is the origin's capacity, which its clients share \
         (learn it on a rule without --key, and limit each client with another entry)"
    } else if o.fair.is_some() {
        "--fair yet: fair shares are not resized to a learned limit"
    } else if o.conntrack {
        "--conntrack: it counts client connections, not requests to the origin"
    } else if o.store.is_some() {
        "--store: Redis decides the limit, with the value of remap.config"
    } else {
        return Ok(());
    };
    Err(OptionError(format!(
        "--limit=auto cannot be combined with {why}"
    )))
}
