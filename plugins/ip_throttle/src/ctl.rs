//! Management: `traffic_ctl plugin msg ip_throttle "CMD …"`, served by
//! [`ats::msg::serve`] (answers in `ip_throttle_ctl.log`, summaries in
//! diags.log). Commands run on a task thread, never on a request path: a
//! reload reads and parses its files there and swaps the result in whole
//! (a request in the meantime uses the old lists, without waiting).
//!
//! A rule is named by its tag (`http.example.com`, as in ip_throttle.log's
//! `rule=` and its metric names), its from-URL, or its `--instance`; a name
//! may select several rules (rules on one host, or sharing an instance),
//! and no name selects every rule.
//!
//! Rules are listed weakly with the remap.config load that made them; once
//! a load succeeds, only its rules are listed (a delayed request may still
//! hold a rule of the previous load).

use std::sync::Arc;
use std::time::Instant;

use ats::msg::{Answer, Commands, Roster};
use ats::ReloadStatus;
use ip_throttle_core::ctl::{self, Command, Reload};
use ip_throttle_core::lists::canonical;
use ip_throttle_core::options::fmt_seconds;
use ip_throttle_core::{Client, ListName, Listed, View};
use limits::quote::quote;
use serde_json::{json, Value};

use crate::rule::Rule;

/// The rules, with the remap.config load that made them.
static RULES: Roster<Rule> = Roster::new();

/// Serves `traffic_ctl plugin msg ip_throttle …` (once per process).
pub(crate) fn init() {
    ats::msg::serve(ctl::PLUGIN, Ctl);
}

/// Lists a new rule for the commands.
pub(crate) fn enlist(rule: &Arc<Rule>) {
    RULES.enlist(rule);
}

/// remap.config is about to be loaded again: new rules are a new generation.
pub(crate) fn pre_reload() {
    RULES.pre_reload();
}

/// A load ended: on success its rules replace the others; on failure its
/// rules were discarded.
pub(crate) fn post_reload(status: ReloadStatus) {
    RULES.post_reload(status);
}

/// The rules `name` selects (all without a name); none is an error
/// listing the rules there are.
fn select(name: Option<&str>) -> Result<Vec<Arc<Rule>>, String> {
    match name {
        Some(n) => RULES.select(|r| r.named(n), Rule::tag).map_err(|known| {
            format!(
                "no rule named {} (a tag, from-URL or --instance); live: {known}",
                quote(n)
            )
        }),
        None => match RULES.live() {
            all if all.is_empty() => Err("no ip_throttle rule is loaded".into()),
            all => Ok(all),
        },
    }
}

struct Ctl;

impl Commands for Ctl {
    type Command = Command;

    fn parse(&self, target: &str, data: &[u8]) -> Option<Result<Command, String>> {
        ctl::parse(target, data)
    }

    fn verb(cmd: &Command) -> &'static str {
        cmd.verb()
    }

    fn run(&self, cmd: Command) -> Result<Answer, String> {
        let rules = select(cmd.rule())?;
        match cmd {
            Command::Reload { what, rule } => reload(&rules, what, rule.is_some()),
            Command::Unban { ip, .. } => unban(&rules, ip),
            Command::Show { ip, .. } => show(&rules, ip),
            Command::Keys { n, .. } => keys(&rules, n),
        }
    }
}

fn reload(rules: &[Arc<Rule>], what: Reload, named: bool) -> Result<Answer, String> {
    let (word, opt) = match what {
        Reload::List(ListName::Allow) => ("allow", Some("--allow-file")),
        Reload::List(ListName::Deny) => ("deny", Some("--deny-file")),
        Reload::Config => ("config", None),
    };
    // Without a rule name, a list is reloaded where the rule has one.
    let has = |r: &Rule| match what {
        Reload::List(l) => r.has_list(l),
        Reload::Config => true,
    };
    let chosen: Vec<&Arc<Rule>> = rules.iter().filter(|r| named || has(r)).collect();
    if chosen.is_empty() {
        return Err(format!(
            "reload {word}: no rule has {}",
            opt.unwrap_or("options")
        ));
    }
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for r in chosen {
        let started = Instant::now();
        let result = match what {
            Reload::List(l) => r.reload_list(l).map(Some),
            Reload::Config => r.reload_config().map(|()| None),
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        match result {
            Ok(n) => {
                let snap = r.throttler.snapshot();
                let (allow, deny) = (snap.lists.allow.len(), snap.lists.deny.len());
                log::info!(
                    "{}: reloaded {word} in {ms:.0} ms: allow list {allow} prefixes, deny list {deny} prefixes{}",
                    r.tag(),
                    match what {
                        Reload::Config => format!("; {}", snap.opts.describe()),
                        Reload::List(_) => String::new(),
                    }
                );
                done.push(json!({
                    "rule": r.tag(),
                    "from": r.from,
                    "prefixes": n,
                    "allow": allow,
                    "deny": deny,
                    "ms": (ms * 10.0).round() / 10.0,
                }));
            }
            Err(e) => failed.push(format!("{}: {e}", r.tag())),
        }
    }
    if !failed.is_empty() {
        let kept = if done.is_empty() {
            String::new()
        } else {
            format!(
                " (reloaded: {})",
                done.iter()
                    .filter_map(|d| d["rule"].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(format!(
            "reload {word}: {}; the old configuration stays{kept}",
            failed.join("; ")
        ));
    }
    Ok(Answer {
        summary: format!("reload {word}: {} rule(s)", done.len()),
        body: json!({ "reloaded": done }),
    })
}

fn unban(rules: &[Arc<Rule>], ip: Client) -> Result<Answer, String> {
    let lifted: Vec<&str> = rules
        .iter()
        .filter(|r| r.unban(ip))
        .map(|r| r.tag())
        .collect();
    if !lifted.is_empty() {
        log::info!("{ip}: unbanned by command in {}", lifted.join(", "));
    }
    Ok(Answer {
        summary: match lifted.len() {
            0 => format!("{ip} was not banned"),
            n => format!("{ip} unbanned in {n} rule(s)"),
        },
        body: json!({ "ip": ip.to_string(), "unbanned": lifted }),
    })
}

/// `show IP` and `key IP`.
fn show(rules: &[Arc<Rule>], ip: Client) -> Result<Answer, String> {
    let states: Vec<Value> = rules.iter().map(|r| state(r, ip)).collect();
    let first = match states.first() {
        Some(s) if s["tracked"] == json!(false) => "not held (allowed)",
        Some(s) => s["state"].as_str().unwrap_or("none"),
        None => "none",
    };
    Ok(Answer {
        summary: format!("{ip}: {first} ({} rule(s))", states.len()),
        body: json!({ "ip": ip.to_string(), "rules": states }),
    })
}

fn state(r: &Rule, ip: Client) -> Value {
    let snap = r.throttler.snapshot();
    // An unknown client has no address to list.
    let listed = match ip.addr().map(|a| snap.lists.classify(canonical(a))) {
        Some(Listed::Allow) => "allow",
        Some(Listed::Deny) => "deny",
        Some(Listed::Neither) | None => "neither",
    };
    let mut v = json!({
        "rule": r.tag(),
        "from": r.from,
        "instance": snap.opts.instance,
        "listed": listed,
        "log_only": snap.opts.log_only,
    });
    match r.show(ip) {
        Some(s) => {
            v["tracked"] = json!(true);
            view_fields(&mut v, &s);
        }
        None => {
            v["tracked"] = json!(false);
            v["state"] = json!("allowed");
        }
    }
    v
}

/// An IP's state, as `show` and `keys` write it.
fn view_fields(v: &mut Value, s: &View) {
    v["state"] = json!(s.phase.name());
    v["delay"] = json!(fmt_seconds(s.delay));
    v["violations"] = json!(s.violations);
    v["delayed"] = json!(s.delayed);
    v["remaining"] = json!(fmt_seconds(s.remaining));
}

/// `keys [N]`: each rule's N hottest IPs, in one array (so a long answer
/// splits along it), rule by rule.
fn keys(rules: &[Arc<Rule>], n: usize) -> Result<Answer, String> {
    let mut listed = Vec::new();
    let mut about = Vec::with_capacity(rules.len());
    for r in rules {
        let table = r.throttler.table();
        let snap = r.throttler.snapshot();
        about.push(json!({
            "rule": r.tag(),
            "from": r.from,
            "instance": snap.opts.instance,
            "log_only": snap.opts.log_only,
            "keys": table.len(),
            "evicted": table.evicted(),
        }));
        for h in r.throttler.top(n) {
            let mut v = json!({
                "rule": r.tag(),
                "ip": h.client.to_string(),
                "prefix": h.prefix,
            });
            view_fields(&mut v, &h.view);
            listed.push(v);
        }
    }
    let first = listed
        .first()
        .and_then(|v| v["ip"].as_str())
        .unwrap_or("none")
        .to_owned();
    Ok(Answer {
        summary: format!(
            "{} IP(s) in {} rule(s), first {first}",
            listed.len(),
            rules.len()
        ),
        body: json!({ "n": n, "rules": about, "ips": listed }),
    })
}
