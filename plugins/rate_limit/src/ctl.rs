//! Live inspection and tuning: `traffic_ctl plugin msg rate_limit "CMD …"`.
//!
//! Served by [`ats::msg::serve`]: every answer is one JSON object per line
//! in `rate_limit_ctl.log` (ATS's log directory), with a one-line summary
//! in diags.log. Parsing happens on traffic_server's management thread
//! (which takes no lock here); the command runs on a task thread, where it
//! does take locks requests take: `show` and `top` lock each shard of the
//! key table in turn (a request of a key in that shard waits for the scan of
//! that one shard), and `set` takes the limiter's slot locks while raising a
//! limit admits waiters. The registry's lock is shared with configuration
//! loads only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use ats::msg::Roster;
use limits::quote::shorten;
use parking_lot::Mutex;
use rate_limit_core::ctl::{self, Command};
use rate_limit_core::key::KeySpec;
use rate_limit_core::{Limiter, Limits, Options};
use serde_json::{json, Value};

use crate::queue::Queued;
use crate::rule::REGISTRY;
use crate::state::Metrics;

/// What `show` and `top` tell about one rule. Held by the rule; listed
/// weakly here, so a rule gone with a reload drops out.
pub(crate) struct Card {
    from: String,
    metrics_name: String,
    metrics: Metrics,
    limiter: Weak<Limiter<Queued>>,
    key: Option<KeySpec>,
    /// Readable names of keys seen waiting or refused, for `top` (the key
    /// table keeps only hashes). Bounded; filled only when uncontended.
    names: Mutex<Names>,
    /// The rule's dry run: `--dry-run`, then `set … dry_run=on|off`.
    pub(crate) dry_run: std::sync::atomic::AtomicBool,
}

static CARDS: Roster<Card> = Roster::new();

/// Most key names a rule remembers for `top`.
const NAMES: usize = 1024;

#[derive(Default)]
struct Names {
    by_key: HashMap<u64, String>,
    order: VecDeque<u64>,
}

impl Card {
    pub(crate) fn new(
        from: &str,
        o: &Options,
        limiter: &Arc<Limiter<Queued>>,
        metrics: Metrics,
    ) -> Arc<Card> {
        let card = Arc::new(Card {
            from: from.to_owned(),
            metrics_name: format!("{}.remap.{}", o.prefix, o.metric_tag),
            metrics,
            limiter: Arc::downgrade(limiter),
            key: o.key.clone(),
            names: Mutex::new(Names::default()),
            dry_run: std::sync::atomic::AtomicBool::new(o.dry_run),
        });
        CARDS.enlist(&card);
        card
    }

    /// Remembers how to show `key` (written as `bytes` by `--key`). Called
    /// for waiting and refused requests only, and skipped under contention.
    pub(crate) fn note_name(&self, key: u64, bytes: &[u8]) {
        let Some(spec) = &self.key else { return };
        let Some(mut n) = self.names.try_lock() else {
            return;
        };
        if n.by_key.contains_key(&key) {
            return;
        }
        if n.order.len() >= NAMES {
            if let Some(old) = n.order.pop_front() {
                n.by_key.remove(&old);
            }
        }
        n.order.push_back(key);
        n.by_key.insert(key, spec.display(bytes));
    }

    pub(crate) fn name(&self, key: u64) -> Option<String> {
        self.names.lock().by_key.get(&key).cloned()
    }
}

/// Serves `traffic_ctl plugin msg rate_limit …` (once per process).
pub(crate) fn init() {
    ats::msg::serve(ctl::PLUGIN, Ctl);
}

struct Ctl;

impl ats::msg::Commands for Ctl {
    type Command = Command;

    fn parse(&self, target: &str, data: &[u8]) -> Option<Result<Command, String>> {
        ctl::parse(target, data)
    }

    fn verb(cmd: &Command) -> &'static str {
        cmd.verb()
    }

    fn run(&self, cmd: Command) -> Answer {
        match cmd {
            Command::Show { target } => show(target.as_deref()),
            Command::Top { target, n } => top(&target, n),
            Command::Set { target, settings } => set(&target, &settings),
            Command::Reload => {
                rate_limit_global::reload("traffic_ctl plugin msg").map(|msg| ats::msg::Answer {
                    summary: msg.clone(),
                    body: json!({ "reloaded": true, "message": msg }),
                })
            }
        }
    }
}

/// A live limiter with its identity, options in force and rules.
struct Target {
    id: String,
    limiter: Arc<Limiter<Queued>>,
    opts: Options,
    cards: Vec<Arc<Card>>,
}

type Live = Vec<(String, Arc<Limiter<Queued>>, Options)>;

/// The live limiters (from the registry) with their rules.
fn targets(live: Live) -> Vec<Target> {
    let cards: Vec<Arc<Card>> = CARDS.live();
    live.into_iter()
        .map(|(id, limiter, opts)| Target {
            cards: cards
                .iter()
                .filter(|c| std::ptr::eq(c.limiter.as_ptr(), Arc::as_ptr(&limiter)))
                .cloned()
                .collect(),
            id,
            limiter,
            opts,
        })
        .collect()
}

impl Target {
    /// Named by its group, or by a rule's metric tag or from-URL.
    fn named(&self, name: &str) -> bool {
        self.by_group(name) || self.cards.iter().any(|c| c.named(name))
    }

    fn by_group(&self, name: &str) -> bool {
        self.opts.group.as_deref() == Some(name)
    }

    /// The rules `name` picks: every rule when it names the group, else
    /// those it names (by metric tag or from-URL).
    fn rules(&self, name: &str) -> Vec<&Arc<Card>> {
        let all = self.by_group(name);
        self.cards.iter().filter(|c| all || c.named(name)).collect()
    }
}

impl Card {
    fn named(&self, name: &str) -> bool {
        self.from == name
            || self.metrics_name == name
            || self
                .metrics_name
                .strip_suffix(name)
                .is_some_and(|s| s.ends_with(".remap."))
    }
}

fn pick(live: Live, name: &str) -> Result<Target, String> {
    let all = targets(live);
    let known: Vec<String> = all.iter().map(|t| t.id.clone()).collect();
    let mut found: Vec<Target> = all.into_iter().filter(|t| t.named(name)).collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no group or rule named {}; live: {}",
            limits::quote::quote(name),
            shorten(&known.join(", "))
        )),
        n => Err(format!(
            "{} names {n} limiters: use the group name or the rule's --tag",
            limits::quote::quote(name)
        )),
    }
}

type Answer = Result<ats::msg::Answer, String>;

fn answer(summary: String, body: Value) -> Answer {
    Ok(ats::msg::Answer { summary, body })
}

fn show(name: Option<&str>) -> Answer {
    let live = REGISTRY.lock().live();
    // A name picks remap limiters, or failing that global-mode selectors.
    let (list, global) = match name {
        None => (targets(live), rate_limit_global::show::selectors(None)),
        Some(n) => match pick(live, n) {
            Ok(t) => (vec![t], None),
            Err(e) => match rate_limit_global::show::selectors(Some(n)) {
                Some((file, sels)) if !sels.is_empty() => (Vec::new(), Some((file, sels))),
                _ => return Err(e),
            },
        },
    };
    let shown: Vec<Value> = list.iter().map(describe).collect();
    let mut summary = format!("{} limiter(s)", shown.len());
    let mut body = json!({ "limiters": shown });
    if let Some((file, sels)) = global {
        summary.push_str(&format!(", {} selector(s)", sels.len()));
        body["global"] = json!({
            "file": file,
            "ats_connections": rate_limit_global::show::ats_connections(),
            "selectors": sels,
        });
    }
    answer(summary, body)
}

fn describe(t: &Target) -> Value {
    let o = &t.opts;
    let u = t.limiter.usage();
    let rules: Vec<Value> = t
        .cards
        .iter()
        .map(|c| {
            let m = &c.metrics;
            let get = |s: Option<ats::stats::Stat>| s.map(|s| s.get());
            json!({
                "from": c.from,
                "metrics": c.metrics_name,
                "admitted": get(m.admitted),
                "queued": get(m.queued),
                "rejected": get(m.rejected),
                "expired": get(m.expired),
                "abandoned": get(m.abandoned),
                "dry_run": c.dry_run.load(std::sync::atomic::Ordering::Relaxed),
            })
        })
        .collect();
    json!({
        "id": t.id,
        "group": o.group,
        "limit": o.limit,
        "rate": o.rate,
        "burst": o.rate.map(|_| o.burst),
        "queue": o.queue,
        "maxage_ms": o.maxage_ms,
        "key": o.key.as_ref().map(|k| k.describe_sources()),
        "active": u.active,
        "waiting": u.waiting,
        "keys": u.keys,
        "evicted": u.evicted,
        "fair": o.fair.as_ref().zip(t.limiter.fair_stats()).map(|(f, s)| json!({
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

fn top(name: &str, n: usize) -> Answer {
    let t = pick(REGISTRY.lock().live(), name)?;
    if t.opts.key.is_none() {
        return Err(format!("top: {} has no --key: use show", t.id));
    }
    let keys: Vec<Value> = t
        .limiter
        .top(n)
        .into_iter()
        .map(|k| {
            let shown = t
                .cards
                .iter()
                .find_map(|c| c.name(k.key))
                .unwrap_or_else(|| format!("#{:016x}", k.key));
            json!({
                "key": shown,
                "active": k.active,
                "waiting": k.waiting,
                "over_rate_ms": k.over_rate / limits::NANOS_PER_MS,
            })
        })
        .collect();
    let first = keys
        .first()
        .and_then(|k| k["key"].as_str())
        .unwrap_or("none")
        .to_owned();
    answer(
        format!("{}: {} key(s), first {first}", t.id, keys.len()),
        json!({ "id": t.id, "keys": keys }),
    )
}

fn set(name: &str, settings: &[ctl::Setting]) -> Answer {
    // Under the registry lock, so a configuration load cannot interleave.
    let mut reg = REGISTRY.lock();
    let t = pick(reg.live(), name)?;
    // The only flag `set` takes is the rules' dry run.
    let dry_only = settings.iter().all(|s| s.switch_value().is_some());
    if t.opts.store.is_some() && !dry_only {
        return Err(format!(
            "set: {} is decided in Redis (--store) with the values of remap.config, which a \
             live change would not reach: nothing changed (edit remap.config and reload)",
            t.id
        ));
    }
    let new = ctl::apply(&t.opts, settings)?;
    if !dry_only {
        t.limiter
            .reconfigure(Limits::of(&new))
            .map_err(|o| format!("set: {o} cannot change live"))?;
        reg.set_live(&t.id, new.clone());
    }
    drop(reg);
    let mut changed: Vec<(&str, String, String)> = t
        .opts
        .limiter_options()
        .into_iter()
        .zip(new.limiter_options())
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, a), (_, b))| (name, a, b))
        .collect();
    // A dry run is each rule's: set on the rules TARGET names, every rule
    // of the group if it names the group (the last dry_run= given wins),
    // until remap.config is next loaded.
    let dry = settings.iter().rev().find_map(ctl::Setting::switch_value);
    if let Some(d) = dry {
        let old: Vec<bool> = t
            .rules(name)
            .into_iter()
            .map(|c| c.dry_run.swap(d, std::sync::atomic::Ordering::Relaxed))
            .collect();
        let was = if old.iter().all(|&o| o) {
            "on"
        } else if old.iter().any(|&o| o) {
            "mixed"
        } else {
            "off"
        };
        let now = if d { "on" } else { "off" };
        if was != now {
            changed.push(("dry-run", was.to_owned(), now.to_owned()));
        }
    }
    let list: Vec<String> = changed
        .iter()
        .map(|(n, a, b)| format!("--{n} {a} -> {b}"))
        .collect();
    log::info!(
        "{}: set live: {} (until remap.config is next loaded)",
        t.id,
        list.join(", ")
    );
    let values: Vec<Value> = changed
        .iter()
        .map(|(n, a, b)| json!({ "option": n, "old": a, "new": b }))
        .collect();
    answer(
        format!("{}: {}", t.id, list.join(", ")),
        json!({ "id": t.id, "changed": values }),
    )
}
