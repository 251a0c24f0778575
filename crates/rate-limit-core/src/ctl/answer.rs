//! What `show`, `top` and `set` answer, as JSON (one object per line in
//! `rate_limit_ctl.log`) with a one-line summary. The plugin finds the
//! limiters and rules a command names and runs it; the words are here.

use limits::{Clock, Waiter, NANOS_PER_MS};
use serde_json::{json, Value};

use crate::{KeyUsage, Limiter, Options};

/// One rule of a limiter, as `show` lists it.
pub struct Rule<'a> {
    pub from: &'a str,
    /// Its metrics' name, `PREFIX.remap.TAG`.
    pub metrics: &'a str,
    /// Its counters: admitted, queued, rejected, expired, abandoned.
    pub counts: [Option<i64>; 5],
    pub dry_run: bool,
    /// `--enforce`: the share of its clients refused for real (percent).
    pub enforce: u8,
}

/// `show`: a limiter `id` with its options in force, its state and rules.
pub fn limiter<W: Waiter, C: Clock>(
    id: &str,
    o: &Options,
    l: &Limiter<W, C>,
    rules: &[Rule<'_>],
) -> Value {
    let u = l.usage();
    let auto = l.auto_state();
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| {
            let [admitted, queued, rejected, expired, abandoned] = r.counts;
            json!({
                "from": r.from,
                "metrics": r.metrics,
                "admitted": admitted,
                "queued": queued,
                "rejected": rejected,
                "expired": expired,
                "abandoned": abandoned,
                "dry_run": r.dry_run,
                "enforce": r.enforce,
            })
        })
        .collect();
    json!({
        "id": id,
        "group": o.group,
        // Learned (`--limit=auto`): the limit in force.
        "limit": auto.map_or(o.limit, |s| Some(s.limit)),
        "auto": auto.zip(o.auto).map(|(s, a)| json!({
            "min": a.min,
            "max": a.max,
            "pinned": s.pinned,
            "probing": s.probing,
            "rtt_baseline_ms": s.baseline.map(|n| n as f64 / NANOS_PER_MS as f64),
            "rtt_recent_ms": s.recent.map(|n| n as f64 / NANOS_PER_MS as f64),
        })),
        "rate": o.rate,
        "burst": o.rate.map(|_| o.burst),
        "queue": o.queue,
        "maxage_ms": o.maxage_ms,
        "block_s": (o.block_s > 0).then_some(o.block_s),
        // A rule-wide block in force (keys show theirs in `keys`).
        "blocked_ms": l.keys().is_none().then(|| l.blocked_for(None).map_or(0, |b| b / NANOS_PER_MS)),
        "key": o.key.as_ref().map(|k| k.describe_sources()),
        "active": u.active,
        "waiting": u.waiting,
        "keys": u.keys,
        "evicted": u.evicted,
        "fair": o.fair.as_ref().zip(l.fair_stats()).map(|(f, s)| json!({
            "source": f.describe_source(),
            "flow_slots": f.flow_slots,
            "strict": f.strict,
            "flows": s.flows,
            "borrowed": s.borrowed,
            "flow_rejected": s.flow_rejected,
        })),
        "rules": rules,
    })
}

/// `top` and `keys`: the keys of limiter `id`, each shown by `name` (as
/// `--key` writes it) or, if its name was not kept, by its hash.
pub fn top(id: &str, keys: &[KeyUsage], name: impl Fn(u64) -> Option<String>) -> (String, Value) {
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| key_value(shown(k.key, &name), k))
        .collect();
    let first = keys
        .first()
        .and_then(|k| k["key"].as_str())
        .unwrap_or("none")
        .to_owned();
    (
        format!("{id}: {} key(s), first {first}", keys.len()),
        json!({ "id": id, "keys": keys }),
    )
}

/// A key as the answers name it: by `name`, or by its hash (`#…`, which
/// the per-key commands take back).
pub fn shown(key: u64, name: impl Fn(u64) -> Option<String>) -> String {
    name(key).unwrap_or_else(|| format!("#{key:016x}"))
}

/// A key's state, as `top`, `keys` and `key` show it.
fn key_value(shown: String, k: &KeyUsage) -> Value {
    json!({
        "key": shown,
        // Always there: the name a key's display cannot give back.
        "hash": format!("#{:016x}", k.key),
        "active": k.active,
        "waiting": k.waiting,
        "over_rate_ms": k.over_rate / NANOS_PER_MS,
        "tokens": k.tokens,
        "blocked_ms": k.blocked / NANOS_PER_MS,
    })
}

/// `key`: the state of `key` (as the operator named it) in limiter `id`,
/// or that it holds none.
pub fn key(id: &str, key: &str, state: Option<&KeyUsage>) -> (String, Value) {
    let Some(k) = state else {
        return (
            format!("{id}: {key} is not held (a full bucket, no block)"),
            json!({ "id": id, "key": key, "held": false }),
        );
    };
    let rate = match (k.tokens, k.over_rate) {
        (_, over) if over > 0 => format!(", {} ms over its rate", over / NANOS_PER_MS),
        (Some(t), _) => format!(", {t} token(s)"),
        (None, _) => String::new(),
    };
    let block = match k.blocked {
        0 => String::new(),
        b => format!(", blocked for {} ms more", b / NANOS_PER_MS),
    };
    let mut body = key_value(key.to_owned(), k);
    body["id"] = json!(id);
    body["held"] = json!(true);
    (
        format!(
            "{id}: {key}: {} active, {} waiting{rate}{block}",
            k.active, k.waiting
        ),
        body,
    )
}

/// `block`: `key` of limiter `id` is refused for `seconds`.
pub fn block(id: &str, key: &str, seconds: u32) -> (String, Value) {
    (
        format!("{id}: {key} blocked for {seconds} s"),
        json!({ "id": id, "key": key, "blocked_s": seconds }),
    )
}

/// `unblock`: whether a block of `key` held.
pub fn unblock(id: &str, key: &str, held: bool) -> (String, Value) {
    let summary = if held {
        format!("{id}: {key} unblocked")
    } else {
        format!("{id}: {key} was not blocked: nothing changed")
    };
    (summary, json!({ "id": id, "key": key, "unblocked": held }))
}

/// `forget`: whether the table held `key`.
pub fn forget(id: &str, key: &str, held: bool) -> (String, Value) {
    let summary = if held {
        format!("{id}: {key} forgotten (a full bucket, no block, no lock-out)")
    } else {
        format!("{id}: {key} is not held: nothing to forget")
    };
    (summary, json!({ "id": id, "key": key, "forgotten": held }))
}

/// One option `set` changed: its name, old and new value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub option: &'static str,
    pub old: String,
    pub new: String,
}

/// The limiter options that differ between `old` and `new`.
pub fn changes(old: &Options, new: &Options) -> Vec<Change> {
    old.limiter_options()
        .into_iter()
        .zip(new.limiter_options())
        .filter(|((_, a), (_, b))| a != b)
        .map(|((option, old), (_, new))| Change { option, old, new })
        .collect()
}

/// A dry run switched to `now` on rules that were `before`: "mixed" if
/// they disagreed. None if nothing changed.
pub fn dry_run(before: &[bool], now: bool) -> Option<Change> {
    let was = if before.iter().all(|&b| b) {
        "on"
    } else if before.iter().any(|&b| b) {
        "mixed"
    } else {
        "off"
    };
    let now = if now { "on" } else { "off" };
    (was != now).then(|| Change {
        option: "dry-run",
        old: was.to_owned(),
        new: now.to_owned(),
    })
}

/// The share enforced set to `now` on rules that had `before`: "mixed"
/// if they disagreed. None if nothing changed.
pub fn enforce(before: &[u8], now: u8) -> Option<Change> {
    let was = match before.split_first() {
        Some((first, rest)) if rest.iter().all(|b| b == first) => first.to_string(),
        Some(_) => "mixed".to_owned(),
        None => return None,
    };
    let now = now.to_string();
    (was != now).then_some(Change {
        option: "enforce",
        old: was,
        new: now,
    })
}

/// `set` on limiter `id`: the list for the summary and log line
/// (`--limit 10 -> 20, …`), and the JSON.
pub fn set(id: &str, changed: &[Change]) -> (String, Value) {
    let list: Vec<String> = changed
        .iter()
        .map(|c| format!("--{} {} -> {}", c.option, c.old, c.new))
        .collect();
    let values: Vec<Value> = changed
        .iter()
        .map(|c| json!({ "option": c.option, "old": c.old, "new": c.new }))
        .collect();
    (list.join(", "), json!({ "id": id, "changed": values }))
}

#[cfg(test)]
mod tests;
