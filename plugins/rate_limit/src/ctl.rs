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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use limits::quote::shorten;
use rate_limit_core::ctl::{self, answer, Command};
use rate_limit_core::{Limiter, Limits, Options};
use serde_json::{json, Value};

use crate::card::{Card, CARDS};
use crate::queue::Queued;
use crate::rule::REGISTRY;

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
            Command::Top { target, n } => top("top", &target, n),
            Command::Keys { target, n } => top("keys", &target, n),
            Command::Key { target, key } => per_key("key", &target, &key, |t, k, shown| {
                let k = k.hash;
                let (summary, body) = answer::key(&t.id, shown, t.limiter.key_usage(k).as_ref());
                answer(summary, body)
            }),
            Command::Block {
                target,
                key,
                seconds,
            } => per_key("block", &target, &key, |t, k, shown| {
                let length = u64::from(seconds) * limits::NANOS_PER_SEC;
                let blocked = match (t.limiter.is_peered(), &k.tag) {
                    // Its peers (or, --store-sync, Redis) are told in the next report.
                    (true, Some(tag)) => t.limiter.block_peer(tag, length),
                    (true, None) => {
                        return Err(format!(
                            "block: {} shares its limits (--peers or --store-sync), which are \
                             told a block by the key's value: name {shown} by it, not by its #HASH",
                            t.id
                        ))
                    }
                    (false, _) => t.limiter.block(k.hash, length),
                };
                if !blocked {
                    return Err(format!(
                        "block: no room for {shown} in {}'s key table (every key of its shard \
                         holds slots or waiters): nothing changed",
                        t.id
                    ));
                }
                log::info!("{}: {shown} blocked for {seconds} s by traffic_ctl", t.id);
                let (summary, body) = answer::block(&t.id, shown, seconds);
                answer(summary, body)
            }),
            Command::Unblock { target, key } => per_key("unblock", &target, &key, |t, k, shown| {
                // Here only: each proxy lifts its own copy of a peer's block.
                let held = t.limiter.unblock(k.hash);
                if held {
                    log::info!("{}: {shown} unblocked by traffic_ctl", t.id);
                }
                let (summary, body) = answer::unblock(&t.id, shown, held);
                answer(summary, body)
            }),
            Command::Forget { target, key } => per_key("forget", &target, &key, |t, k, shown| {
                let held = t.limiter.forget(k.hash);
                if held {
                    log::info!("{}: {shown} forgotten by traffic_ctl", t.id);
                }
                let (summary, body) = answer::forget(&t.id, shown, held);
                answer(summary, body)
            }),
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
                .filter(|c| c.limiter_id == limiter.id())
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
    let get = |s: Option<ats::stats::Stat>| s.map(|s| s.get());
    let rules: Vec<answer::Rule<'_>> = t
        .cards
        .iter()
        .map(|c| {
            let m = &c.metrics;
            answer::Rule {
                from: &c.from,
                metrics: &c.metrics_name,
                counts: [m.admitted, m.queued, m.rejected, m.expired, m.abandoned].map(get),
                dry_run: c.dry_run.load(Ordering::Relaxed),
                enforce: c.enforce.load(Ordering::Relaxed),
            }
        })
        .collect();
    answer::limiter(&t.id, &t.opts, &t.limiter, &rules)
}

fn top(verb: &str, name: &str, n: usize) -> Answer {
    let t = pick(REGISTRY.lock().live(), name)?;
    if t.opts.key.is_none() {
        return Err(format!(
            "{verb}: {} has no --key: use show, or key {name} {}",
            t.id,
            ctl::WHOLE_RULE
        ));
    }
    let (summary, body) = answer::top(&t.id, &t.limiter.top(n), |k| {
        t.cards.iter().find_map(|c| c.name(k))
    });
    answer(summary, body)
}

/// A key as a per-key command names it.
struct Named {
    /// Its hash in the limiter's table; `None`: a rule-wide limiter's own
    /// state (KEY `*`).
    hash: Option<u64>,
    /// A peered limiter's peer tag, when named by value (not `#HASH`).
    tag: Option<Vec<u8>>,
}

/// Runs a per-key command on the key `key` names in the limiter `name`
/// names, shown as the rules know it or as the operator wrote it.
fn per_key(
    verb: &str,
    name: &str,
    key: &str,
    run: impl FnOnce(&Target, Named, &str) -> Answer,
) -> Answer {
    let t = pick(REGISTRY.lock().live(), name)?;
    let mut tag = None;
    // The key's own bytes, when named by value (not `#HASH`).
    let mut raw: Option<Vec<u8>> = None;
    let k = match (&t.opts.key, t.limiter.keys(), key) {
        (None, _, ctl::WHOLE_RULE) => None,
        (None, _, _) => {
            return Err(format!(
                "{verb}: {} has no --key: its own state is KEY {}",
                t.id,
                ctl::WHOLE_RULE
            ))
        }
        (Some(spec), Some(table), k) => {
            let hash = k
                .strip_prefix('#')
                .filter(|h| h.len() == 16)
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            let mut bytes = Vec::new();
            match hash {
                Some(h) => Some(h),
                None if spec.named_key(k, &mut bytes) => {
                    let named = bytes.clone();
                    raw = Some(named.clone());
                    if t.limiter.is_peered() {
                        // A peered table is keyed by the peer tag.
                        rate_limit_core::peering::to_peer_tag(spec, &mut bytes);
                        tag = Some(bytes.clone());
                    }
                    let hash = table.hash(&bytes);
                    // Named from now on, as a client's key is once seen.
                    for c in &t.cards {
                        c.note_name(hash, &named);
                    }
                    Some(hash)
                }
                None => {
                    return Err(format!(
                        "{verb}: {} is not a key of {} (--key={}): allowed its value (for ip an \
                         address), the key as top shows it, or top's #HASH",
                        limits::quote::quote(k),
                        t.id,
                        spec.describe_sources()
                    ))
                }
            }
        }
        (Some(_), None, _) => return Err(format!("{verb}: {} holds no keys", t.id)),
    };
    if let Some(s) = t.opts.store.as_ref().filter(|s| s.sync_ms.is_none()) {
        // Exact mode: the state is Redis's; say where its block is.
        let where_ = match (k, &raw) {
            (Some(_), None) => "name the key by its value to be told its Redis key".to_owned(),
            (_, bytes) => {
                let base = store::redis::key_base(&s.namespace, bytes.as_deref());
                format!("its block, if any, is Redis's {base}:block (redis-cli DEL lifts it)")
            }
        };
        return Err(format!(
            "{verb}: {} is decided in Redis (--store): its keys' state is Redis's, which \
             the per-key commands do not reach; nothing changed: {where_}",
            t.id
        ));
    }
    if k.is_none() && t.opts.rate.is_none() && verb == "block" {
        return Err(format!(
            "block: {} has neither --key nor --rate: a block of the whole rule needs --rate \
             (it is checked with the bucket)",
            t.id
        ));
    }
    let shown = k
        .and_then(|k| t.cards.iter().find_map(|c| c.name(k)))
        .unwrap_or_else(|| key.to_owned());
    run(&t, Named { hash: k, tag }, &shown)
}

fn set(name: &str, settings: &[ctl::Setting]) -> Answer {
    // Under the registry lock, so a configuration load cannot interleave.
    let mut reg = REGISTRY.lock();
    let t = pick(reg.live(), name)?;
    // The rules' own settings (the dry run, the share enforced) leave the
    // limiter alone.
    let rules_only = settings.iter().all(ctl::Setting::of_the_rule);
    if t.opts.store.is_some() && !rules_only {
        return Err(format!(
            "set: {} is decided in Redis (--store) with the values of remap.config, which a \
             live change would not reach: nothing changed (edit remap.config and reload)",
            t.id
        ));
    }
    let new = ctl::apply(&t.opts, settings)?;
    if !rules_only {
        t.limiter
            .reconfigure(Limits::of(&new))
            .map_err(|o| format!("set: {o} cannot change live"))?;
        reg.set_live(&t.id, new.clone());
    }
    drop(reg);
    let mut changed = answer::changes(&t.opts, &new);
    // A learned limit (`--limit=auto`) is pinned, or learns again.
    if let (Some(_), Some(v)) = (
        t.opts.auto,
        settings.iter().rev().find_map(ctl::Setting::limit_value),
    ) {
        let before = t.limiter.auto_state().map(|s| (s.limit, s.pinned));
        if let (Some(now), Some((was, pinned))) = (t.limiter.pin_limit(v), before) {
            let shown = |l: u32, pinned: bool| match pinned {
                true => l.to_string(),
                false => format!("auto ({l})"),
            };
            changed.push(answer::Change {
                option: "limit",
                old: shown(was, pinned),
                new: shown(now, v.is_some()),
            });
        }
    }
    // A dry run is each rule's: set on the rules TARGET names, every rule
    // of the group if it names the group (the last dry_run= given wins),
    // until remap.config is next loaded.
    if let Some(d) = settings.iter().rev().find_map(ctl::Setting::switch_value) {
        let before: Vec<bool> = t
            .rules(name)
            .into_iter()
            .map(|c| c.dry_run.swap(d, Ordering::Relaxed))
            .collect();
        changed.extend(answer::dry_run(&before, d));
    }
    // So is the share enforced (the last enforce= given wins).
    if let Some(e) = settings.iter().rev().find_map(ctl::Setting::enforce_value) {
        let before: Vec<u8> = t
            .rules(name)
            .into_iter()
            .map(|c| c.enforce.swap(e, Ordering::Relaxed))
            .collect();
        changed.extend(answer::enforce(&before, e));
    }
    let (list, body) = answer::set(&t.id, &changed);
    log::info!(
        "{}: set live: {list} (until remap.config is next loaded)",
        t.id
    );
    answer(format!("{}: {list}", t.id), body)
}
