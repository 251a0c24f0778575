//! What `traffic_ctl plugin msg rate_limit show` tells of the global mode:
//! each selector's limits, connections open and parked, and counts since
//! its file was loaded.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use sni_limit::{Refusal, Sni};

use super::Sel;

/// The selectors `name` picks (by SNI or alias; `*` or `default`: the
/// catch-all; `""` cannot be typed: `show` lists it), or all of them;
/// `None` if the global mode is off. Also the file's name.
pub fn selectors(name: Option<&str>) -> Option<(String, Vec<Value>)> {
    let (file, loaded) = super::loaded()?;
    let picked = loaded.sels.iter().filter(|s| match name {
        None => true,
        Some("default") => s.core.conf().sni == Sni::Any,
        Some(n) => names(s).any(|x| x.eq_ignore_ascii_case(n)),
    });
    Some((
        file.display().to_string(),
        picked.map(|s| describe(s)).collect(),
    ))
}

/// Client connections Traffic Server has open now: every selector's
/// `active` is part of it (a larger sum means connections whose close the
/// plugin never saw; see docs/rate_limit.md, "A connection's path").
pub fn ats_connections() -> Option<i64> {
    ats::mgmt::record_int("proxy.process.net.connections_currently_open")
}

fn names(s: &Sel) -> impl Iterator<Item = &str> {
    let c = s.core.conf();
    std::iter::once(c.sni.label()).chain(c.aliases.iter().map(String::as_str))
}

fn describe(s: &Sel) -> Value {
    let sel = &s.core;
    let c = sel.conf();
    let n = &sel.counts;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let refused: serde_json::Map<String, Value> = Refusal::ALL
        .iter()
        .map(|r| (r.word().to_owned(), json!(n.refused(*r))))
        .collect();
    let ip_rep = sel.ip_rep().map(|(name, sieve)| {
        json!({
            "name": name,
            "pressure": sel.pressure(),
            "addresses": sieve.len(),
        })
    });
    json!({
        "sni": c.sni.label(),
        "catch_all": c.sni == Sni::Any,
        "no_sni": c.sni == Sni::Missing,
        "aliases": c.aliases,
        "line": c.line,
        "limit": c.limit,
        "rate": c.rate.map(|r| r.per_second),
        "burst": c.rate.map(|r| r.burst),
        "queue": c.queue.map(|q| json!({ "size": q.size, "max_age_s": q.max_age })),
        "per_ip": c.per_ip.map(|p| json!({
            "limit": p.limit,
            "rate": p.rate.map(|r| r.per_second),
            "burst": p.rate.map(|r| r.burst),
            "keys": p.keys,
            "tracked": sel.per_ip_keys(),
        })),
        "ip_rep": ip_rep,
        "exclude": c.exclude.is_some(),
        "metrics": c.metrics.as_ref().map(|m| format!("{}.sni.{}", m.prefix, m.tag)),
        "active": sel.open(),
        "waiting": sel.limiter().map_or(0, |l| l.queued()),
        "admitted": get(&n.admitted),
        "queued": get(&n.queued),
        "resumed": get(&n.resumed),
        "abandoned": get(&n.abandoned),
        "excluded": get(&n.excluded),
        "refused": refused,
    })
}
