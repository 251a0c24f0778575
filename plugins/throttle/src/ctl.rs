//! Live inspection and tuning: `traffic_ctl plugin msg throttle "CMD …"`,
//! served by [`ats::msg::serve`] (answers in `throttle_ctl.log`, summaries
//! in diags.log, commands run on a task thread).
//!
//! Rules are listed weakly here when ATS creates them; the list's mutex is
//! taken by rule creation and commands only, never by a request. A rule is
//! named by its `id` (or its from-URL); several rules may share an id (and
//! their metrics): `set` changes them all.
//!
//! A live change lasts until remap.config is next loaded: ATS then builds
//! every rule anew from the file.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ats::msg::{Answer, Commands, Roster};
use limits::quote::quote;
use serde_json::{json, Value};
use throttle_core::ctl::{self, Command, Setting};

use crate::Rule;

/// The rules ATS holds now: a rule ATS deleted (its `live` cleared) drops
/// out while its last transactions finish.
static RULES: Roster<Rule> = Roster::filtered(|r| r.live.load(Ordering::Acquire));

/// Serves `traffic_ctl plugin msg throttle …` (once per process).
pub(crate) fn init() {
    ats::msg::serve(ctl::PLUGIN, Ctl);
}

/// Lists a new rule for the commands.
pub(crate) fn enlist(rule: &Arc<Rule>) {
    RULES.enlist(rule);
}

/// The live rules `name` names (id or from-URL); none is an error listing
/// the ids there are.
fn named(name: &str) -> Result<Vec<Arc<Rule>>, String> {
    RULES
        .select(|r| r.id == name || r.from == name, |r| &r.id)
        .map_err(|known| format!("no rule with id {}; live: {known}", quote(name)))
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
        match cmd {
            Command::Show { id } => show(id.as_deref()),
            Command::Set { id, settings } => set(&id, &settings),
        }
    }
}

fn show(id: Option<&str>) -> Result<Answer, String> {
    let rules = match id {
        Some(name) => named(name)?,
        None => RULES.live(),
    };
    let shown: Vec<Value> = rules.iter().map(|r| describe(r)).collect();
    Ok(Answer {
        summary: format!("{} rule(s)", shown.len()),
        body: json!({ "rules": shown }),
    })
}

fn describe(r: &Rule) -> Value {
    let m = &r.metrics;
    json!({
        "id": r.id,
        "from": r.from,
        // Learned (`max:auto`): the max in force.
        "max": r.gate.max(),
        "auto": learned(r),
        "stale": r.stale.load(Ordering::Relaxed),
        "statfreq_ms": r.statfreq_ms,
        "inflight": r.gate.in_flight(),
        // Cumulative metrics, shared by the rules of one id.
        "counters": {
            "admitted": m.admitted.get(),
            "fresh": m.fresh.get(),
            "stale": m.stale.get(),
            "unavailable": m.unavailable.get(),
        },
    })
}

/// A learned max's bounds and state, for `show`; `null` for a fixed max.
fn learned(r: &Rule) -> Value {
    let (Some(c), Some(b)) = (&r.auto, r.bounds) else {
        return Value::Null;
    };
    let s = c.state();
    let ms = |n: Option<u64>| n.map(|n| n as f64 / 1e6);
    json!({
        "min": b.min,
        "max": b.max,
        // The controller's; the rule's `max` reaches it by steps.
        "limit": s.limit,
        "pinned": s.pinned,
        "probing": s.probing,
        "rtt_baseline_ms": ms(s.baseline),
        "rtt_recent_ms": ms(s.recent),
    })
}

fn set(id: &str, settings: &[Setting]) -> Result<Answer, String> {
    let rules = named(id)?;
    if settings.contains(&Setting::Max(0)) {
        if let Some(r) = rules.iter().find(|r| r.auto.is_some()) {
            return Err(format!(
                "set: max=0 on rule {} (id {}), whose max is learned: a pinned max is at least \
                 1 (allowed max=1 to {}, or max=auto); nothing changed",
                r.from,
                r.id,
                u32::MAX
            ));
        }
    }
    if settings.contains(&Setting::MaxAuto) {
        if let Some(r) = rules.iter().find(|r| r.auto.is_none()) {
            return Err(format!(
                "set: max=auto on rule {} (id {}), whose max is fixed: a max is learned from \
                 remap.config's max:auto, not switched live; nothing changed",
                r.from, r.id
            ));
        }
    }
    let mut answers = Vec::new();
    let mut lines = Vec::new();
    for r in &rules {
        let mut changed = Vec::new();
        for s in settings {
            let (old, new) = match (*s, &r.auto) {
                (Setting::Stale(v), _) => (json!(r.stale.swap(v, Ordering::Relaxed)), json!(v)),
                (Setting::Max(v), None) => {
                    let old = r.gate.max();
                    r.gate.set_max(v);
                    (json!(old), json!(v))
                }
                // A learned max is pinned (`max=N`) or learns again.
                (_, Some(c)) => {
                    let shown = |l: u32, pinned: bool| match pinned {
                        true => l.to_string(),
                        false => format!("auto ({l})"),
                    };
                    let was = c.state();
                    let now = c.pin_into(s.value(), &r.gate);
                    (
                        json!(shown(was.limit, was.pinned)),
                        json!(shown(now, s.value().is_some())),
                    )
                }
                (Setting::MaxAuto, None) => continue,
            };
            changed.push((s.name(), old, new));
        }
        let list: Vec<String> = changed
            .iter()
            .map(|(n, a, b)| format!("{n} {a} -> {b}"))
            .collect();
        log::info!(
            "rule {} id={}: set live: {} (until remap.config is next loaded)",
            r.from,
            r.id,
            list.join(", ")
        );
        lines.push(list.join(", "));
        answers.push(json!({
            "from": r.from,
            "changed": changed
                .iter()
                .map(|(n, a, b)| json!({ "option": n, "old": a, "new": b }))
                .collect::<Vec<_>>(),
        }));
    }
    Ok(Answer {
        summary: format!("{id}: {} rule(s): {}", rules.len(), lines.join("; ")),
        body: json!({ "id": id, "rules": answers }),
    })
}
