//! Reading a rule's `@pparam`s one at a time: the rule's own options (the
//! table [`OPTIONS`]: each one's syntax and value), in the order given (the
//! first mistake is the one reported). The peer, store and fair options are
//! kept for their modules; how the options combine is checked after, in
//! `checks.rs`.

use optspec::{Live, Opt, Repeats, Tokens};

use super::{
    invalid, log_name_ok, tables, uint, OptionError, Options, DEFAULT_ERROR, DEFAULT_KEYS,
    DEFAULT_PREFIX, FAIR, LOG_NAMES_ALLOWED, MAX_AUTO_LIMIT, MAX_BLOCK_SECONDS, MAX_GROUP_LEN,
    MAX_KEYS, MAX_RATE, PEERS, ROLLOUT_TABLE, RULE, STORE,
};

/// The options as given, each checked on its own; the rule-wide values are
/// already in `o`, the ones that depend on others wait here.
pub(super) struct Given {
    /// The options given, in order.
    pub seen: Vec<&'static str>,
    pub o: Options,
    pub limit: Option<u32>,
    /// `--limit=auto`, and `--limit-min`/`--limit-max` as given.
    pub auto: bool,
    pub limit_min: Option<u32>,
    pub limit_max: Option<u32>,
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

/// Reads `args` into `g` (fresh from [`Given::new`]): every option known,
/// given once, with a valid value.
pub(super) fn read(args: &[&str], g: &mut Given) -> Result<(), OptionError> {
    let tables = tables();
    let mut tokens = Tokens::new(args, &tables, Repeats::Refuse);
    for token in tokens.by_ref() {
        let t = token.map_err(|e| OptionError(e.message(&tables)))?;
        let kept = match t.table {
            PEERS => &mut g.peer_raw,
            STORE => &mut g.store_raw,
            FAIR => &mut g.fair_raw,
            ROLLOUT_TABLE => {
                ROLLOUT[t.index].apply(g, t.value, &())?;
                continue;
            }
            RULE => {
                OPTIONS[t.index].apply(g, t.value, &())?;
                continue;
            }
            // No other table is in `tables()` (a test ties the numbers to it).
            _ => return Err(OptionError(format!("unknown option --{}", t.name))),
        };
        kept.push((t.name, t.value.unwrap_or_default().to_owned()));
    }
    g.seen = tokens.into_seen();
    Ok(())
}

impl Given {
    pub(super) fn new() -> Given {
        Given {
            seen: Vec::new(),
            o: Options {
                limit: None,
                queue: u32::MAX,
                error: DEFAULT_ERROR,
                retry: 0,
                header: None,
                maxage_ms: 0,
                prefix: DEFAULT_PREFIX.to_owned(),
                metric_tag: String::new(),
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
                enforce: crate::enforce::ALL,
                exempt: None,
                log: None,
                count_status: None,
                block_s: 0,
                auto: None,
                warnings: Vec::new(),
            },
            limit: None,
            auto: false,
            limit_min: None,
            limit_max: None,
            queue: None,
            burst: None,
            tag: None,
            exempt: None,
            fair_raw: Vec::new(),
            peer_raw: Vec::new(),
            store_raw: Vec::new(),
            sources: None,
            prefix: None,
            trusted: None,
            forwarded: crate::key::ForwardedHeader::XForwardedFor,
        }
    }
}

impl Given {
    /// The options of a running rule, for a live `set` (`live.rs`): the
    /// values the setters stage start at the rule's.
    pub(super) fn live(current: &Options) -> Given {
        let mut g = Given::new();
        g.o = current.clone();
        g.limit = current.limit;
        g.queue = Some(current.queue);
        g.burst = Some(current.burst);
        g
    }

    /// The options after a live `set`. Only the values of settable
    /// options ([`Live::Set`]) are taken from what the setters staged.
    pub(super) fn finish_live(self) -> Options {
        let mut o = self.o;
        o.limit = self.limit;
        o.queue = self.queue.unwrap_or(o.queue);
        o.burst = self.burst.unwrap_or(o.burst);
        o
    }

    /// `set NAME=off` of a settable flag.
    pub(super) fn switch_off(&mut self, option: &str) -> R {
        match option {
            "dry-run" => self.o.dry_run = false,
            _ => return Err(OptionError(format!("--{option} cannot be switched off"))),
        }
        Ok(())
    }
}

type R = Result<(), OptionError>;

/// The rule's own options: the single source of their names.
pub(super) static OPTIONS: &[Opt<Given, (), OptionError>] = &[
    Opt::value(
        "limit",
        "most transactions active at once, or auto",
        set_limit,
    )
    .live(Live::Set),
    Opt::value(
        "queue",
        "most transactions waiting",
        |g: &mut Given, v: &str, _: &()| {
            g.queue = Some(uint("queue", v, 0, u64::from(u32::MAX), "")? as u32);
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::value("error", "the status of refused transactions", |g, v, _| {
        g.o.error = uint("error", v, 400, 599, "")? as u16;
        Ok(())
    }),
    Opt::value("retry", "Retry-After on refusals, seconds", |g, v, _| {
        g.o.retry = uint("retry", v, 0, u64::from(u32::MAX), "")? as u32;
        Ok(())
    }),
    Opt::value("header", "request header given the time waited", set_header),
    Opt::value(
        "maxage",
        "longest wait in the queue, ms",
        |g: &mut Given, v: &str, _: &()| {
            g.o.maxage_ms = uint("maxage", v, 0, u64::from(u32::MAX), "")?;
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::value("prefix", "metric name prefix", |g, v, _| {
        g.o.prefix = metric_part("prefix", v)?;
        Ok(())
    }),
    Opt::value("tag", "metric name tag", |g, v, _| {
        g.tag = Some(metric_part("tag", v)?);
        Ok(())
    }),
    Opt::flag(
        "conntrack",
        "count connections, not transactions",
        |g, _| {
            g.o.conntrack = true;
            Ok(())
        },
    ),
    Opt::value("rate", "requests per second", set_rate).live(Live::Set),
    Opt::value(
        "burst",
        "requests at once from a full rate bucket",
        |g: &mut Given, v: &str, _: &()| {
            g.burst = Some(uint("burst", v, 1, u64::from(u32::MAX), "")? as u32);
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::flag(
        "ratelimit-headers",
        "RateLimit-Policy and RateLimit fields",
        |g, _| {
            g.o.ratelimit_headers = true;
            Ok(())
        },
    ),
    Opt::value(
        "key",
        "limit each client separately, identified by this",
        |g, v, _| {
            let parsed = crate::key::KeySpec::parse_sources(v).map_err(|_| {
                invalid(
                "key",
                v,
                "ip, header:NAME, cookie:NAME or query:NAME, comma-separated, each at most once",
            )
            })?;
            g.sources = Some(parsed);
            Ok(())
        },
    ),
    Opt::value(
        "key-prefix",
        "prefix lengths ip keys are aggregated to",
        |g, v, _| {
            let parsed = crate::key::KeySpec::parse_prefix(v).ok_or_else(|| {
                invalid(
                    "key-prefix",
                    v,
                    "IPv4/IPv6 prefix lengths, 0 to 32 / 0 to 128 (e.g. 32/64 or 24/48)",
                )
            })?;
            g.prefix = Some(parsed);
            Ok(())
        },
    ),
    Opt::value("keys", "most client keys held at once", |g, v, _| {
        g.o.keys = uint("keys", v, 1, MAX_KEYS, "")? as usize;
        Ok(())
    }),
    Opt::value("key-missing", "requests without their key", |g, v, _| {
        g.o.key_missing = crate::key::Missing::parse(v)
            .ok_or_else(|| invalid("key-missing", v, "shared, pass or refuse"))?;
        Ok(())
    }),
    Opt::value(
        "trusted-proxies",
        "peers whose forwarding header is believed",
        |g, v, _| {
            let parsed = crate::key::KeySpec::parse_trusted(v).map_err(|_| {
                invalid(
                    "trusted-proxies",
                    v,
                    "IP addresses or CIDRs, comma-separated",
                )
            })?;
            g.trusted = Some(parsed);
            Ok(())
        },
    ),
    Opt::value(
        "forwarded-header",
        "the header the trusted proxies write",
        |g, v, _| {
            g.forwarded = crate::key::ForwardedHeader::parse(v)
                .ok_or_else(|| invalid("forwarded-header", v, "X-Forwarded-For or Forwarded"))?;
            Ok(())
        },
    ),
    Opt::value("group", "rules of a group share one limiter", set_group),
    Opt::value(
        "block",
        "seconds a client refused for its rate stays refused",
        |g: &mut Given, v: &str, _: &()| {
            g.o.block_s = uint("block", v, 1, MAX_BLOCK_SECONDS, "")? as u32;
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::value(
        "limit-min",
        "the lowest limit --limit=auto learns",
        |g: &mut Given, v: &str, _: &()| {
            g.limit_min = Some(uint("limit-min", v, 1, u64::from(MAX_AUTO_LIMIT), "")? as u32);
            Ok(())
        },
    ),
    Opt::value(
        "limit-max",
        "the highest limit --limit=auto learns",
        |g: &mut Given, v: &str, _: &()| {
            g.limit_max = Some(uint("limit-max", v, 1, u64::from(MAX_AUTO_LIMIT), "")? as u32);
            Ok(())
        },
    ),
];

/// The rule's rollout options: a table of their own, listed after the
/// modules' in the known options, where they have always been.
pub(super) static ROLLOUT: &[Opt<Given, (), OptionError>] = &[
    Opt::flag(
        "dry-run",
        "decide, count and log, but refuse nobody",
        |g: &mut Given, _: &()| {
            g.o.dry_run = true;
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::value(
        "enforce",
        "the share of clients refused, in percent; the others are a dry run",
        |g: &mut Given, v: &str, _: &()| {
            g.o.enforce = uint("enforce", v, 0, 100, "")? as u8;
            Ok(())
        },
    )
    .live(Live::Set),
    Opt::value("exempt", "clients never limited by the rule", |g, v, _| {
        let nets = forwarded::parse_trusted(v)
            .map_err(|_| invalid("exempt", v, "IP addresses or CIDRs, comma-separated"))?;
        g.exempt = Some(nets);
        Ok(())
    }),
    Opt::value("log", "the refusal log, NAME.log", |g, v, _| {
        let base = v.strip_suffix(".log").unwrap_or(v);
        if !log_name_ok(base) {
            return Err(invalid("log", v, LOG_NAMES_ALLOWED));
        }
        g.o.log = Some(base.to_owned());
        Ok(())
    }),
    Opt::value(
        "count-status",
        "responses that charge the rate bucket",
        |g, v, _| {
            g.o.count_status = Some(crate::status::StatusList::parse(v)?);
            Ok(())
        },
    ),
];

fn set_limit(g: &mut Given, v: &str, _: &()) -> R {
    if v == "auto" {
        g.auto = true;
        g.limit = None;
        return Ok(());
    }
    if v == "0" {
        let e = invalid("limit", v, "an integer from 1 to 4294967295");
        return Err(OptionError(format!(
            "{e}; upstream 9.2 treats 0 as 'reject everything' and 10.1 as \
                 'unlimited': omit --limit for no concurrency limit with --rate, or \
                 set --queue=0 and a small limit"
        )));
    }
    g.limit = Some(uint("limit", v, 1, u64::from(u32::MAX), " or auto")? as u32);
    g.auto = false;
    Ok(())
}

fn set_header(g: &mut Given, v: &str, _: &()) -> R {
    let name_part = v.strip_prefix('@').unwrap_or(v);
    if name_part.is_empty() || name_part.starts_with('-') || !name_part.bytes().all(is_tchar) {
        return Err(invalid(
            "header",
            v,
            "an HTTP header name (optionally starting with '@'), not starting with '-'",
        ));
    }
    g.o.header = Some(v.to_owned());
    Ok(())
}

/// `--prefix` and `--tag`: a part of metric names.
fn metric_part(name: &str, v: &str) -> Result<String, OptionError> {
    if v.is_empty()
        || v.starts_with('-')
        || !v
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\'')
    {
        return Err(invalid(
            name,
            v,
            "a non-empty metric name part without spaces or quotes, not starting with '-'",
        ));
    }
    Ok(v.to_owned())
}

fn set_rate(g: &mut Given, v: &str, _: &()) -> R {
    let allowed =
        "a number of requests per second greater than 0 and at most 1000000 (e.g. 50 or 0.5)";
    let well_formed = !v.is_empty()
        && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && v.bytes().filter(|&b| b == b'.').count() <= 1
        && v.bytes().any(|b| b.is_ascii_digit());
    match v.parse::<f64>() {
        Ok(r) if well_formed && r > 0.0 && r <= MAX_RATE => g.o.rate = Some(r),
        _ => return Err(invalid("rate", v, allowed)),
    }
    Ok(())
}

fn set_group(g: &mut Given, v: &str, _: &()) -> R {
    let ok = (1..=MAX_GROUP_LEN).contains(&v.len())
        && !v.starts_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(invalid(
            "group",
            v,
            "a name of 1 to 64 letters, digits, '.', '_' or '-', not starting with '-'",
        ));
    }
    g.o.group = Some(v.to_owned());
    Ok(())
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
