//! Live changes to a running limiter: the values of
//! `traffic_ctl plugin msg rate_limit "set TARGET NAME=VALUE …"`.
//!
//! The tables say which options `set` takes ([`Live::Set`]) and which a
//! reload changes in place ([`Live::Reload`] and up); a `set` value is read
//! by the option's own setter, so it passes the same checks as in
//! remap.config, and its error says what the `@pparam` error says is
//! allowed. A `set` name is the option's, with `_` for `-` (`dry_run`).

use limits::quote::quote;
use optspec::{Live, Opt, Takes};

use super::args::{Given, OPTIONS, ROLLOUT};
use super::common::invalid_head;
use super::{tables, OptionError, Options, DRY_STORE_WHY, MAX_BURST_SECONDS};

/// The options a running instance takes at `at_least` ([`Live::Reload`]:
/// what a reload changes in place; [`Live::Set`]: what `set` takes), in
/// table order.
pub fn names(at_least: Live) -> Vec<&'static str> {
    let tables = tables();
    let mut out = Vec::new();
    for t in tables {
        for i in 0..t.count() {
            if t.live(i) >= at_least {
                out.push(t.name(i));
            }
        }
    }
    out
}

type RuleOpt = Opt<Given, (), OptionError>;

/// The options `set` takes: the rule's own ([`Live::Set`]; a test checks
/// that no module's table marks one), in table order.
fn settable() -> impl Iterator<Item = &'static RuleOpt> {
    OPTIONS
        .iter()
        .chain(ROLLOUT.iter())
        .filter(|o| o.live == Live::Set)
}

/// One `NAME=VALUE` of a `set` command, checked.
#[derive(Clone)]
pub struct Setting {
    opt: &'static RuleOpt,
    value: Value,
}

impl PartialEq for Setting {
    fn eq(&self, other: &Setting) -> bool {
        self.opt.name == other.opt.name && self.value == other.value
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}={:?}", self.opt.name, self.value)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Value {
    /// A value option's text, valid for its setter.
    Text(String),
    /// A flag, `on` or `off`.
    Switch(bool),
}

impl Setting {
    /// Reads `NAME=VALUE` as `--NAME=VALUE` would be read.
    pub fn parse(s: &str) -> Result<Setting, String> {
        let bad = |allowed: &str| format!("set: {} is invalid: allowed {allowed}", quote(s));
        let words: Vec<String> = settable().map(|o| word(o.name)).collect();
        let Some((name, value)) = s.split_once('=') else {
            return Err(bad(&format!(
                "NAME=VALUE with NAME {}",
                or_list(&words, "")
            )));
        };
        let Some(opt) = settable().find(|o| word(o.name) == name) else {
            return Err(bad(&or_list(&words, "=")));
        };
        let value = if opt.takes() == Takes::Flag {
            match value {
                "on" => Value::Switch(true),
                "off" => Value::Switch(false),
                _ => return Err(bad(&format!("{name}=on or {name}=off"))),
            }
        } else {
            // Checked now, on a scratch copy: a bad value changes nothing.
            if let Err(e) = opt.apply(&mut Given::new(), Some(value), &()) {
                return Err(bad(&format!("{name}= {}", allowed(opt.name, value, &e))));
            }
            Value::Text(value.to_owned())
        };
        Ok(Setting { opt, value })
    }

    /// A flag's `on` or `off`; `None` for a value. The only flag `set`
    /// takes is `--dry-run`, each rule's own (a test keeps it so).
    pub fn switch_value(&self) -> Option<bool> {
        match self.value {
            Value::Switch(on) => Some(on),
            Value::Text(_) => None,
        }
    }

    /// An `enforce=` value: like the dry run, each rule's own.
    pub fn enforce_value(&self) -> Option<u8> {
        match &self.value {
            Value::Text(v) if self.opt.name == "enforce" => v.parse().ok(),
            _ => None,
        }
    }

    /// A `limit=` value: `Some(None)` for `auto`, else the limit. On a
    /// limiter with `--limit=auto` it pins the learned limit (or releases it).
    pub fn limit_value(&self) -> Option<Option<u32>> {
        match &self.value {
            Value::Text(v) if self.opt.name == "limit" => match v.as_str() {
                "auto" => Some(None),
                n => n.parse().ok().map(Some),
            },
            _ => None,
        }
    }

    /// Each rule's own (`dry_run=`, `enforce=`), not its limiter's.
    pub fn of_the_rule(&self) -> bool {
        matches!(self.opt.name, "dry-run" | "enforce")
    }
}

/// An option's name as `set` writes it.
fn word(option: &str) -> String {
    option.replace('-', "_")
}

/// What an [`invalid`](super::invalid) error of `option` at `value` says
/// is allowed (the whole message for one worded otherwise).
fn allowed(option: &str, value: &str, e: &OptionError) -> String {
    let head = invalid_head(option, value);
    e.0.strip_prefix(&head).unwrap_or(&e.0).to_owned()
}

/// `a=, b= or c=`.
fn or_list(words: &[String], suffix: &str) -> String {
    let items: Vec<String> = words.iter().map(|w| format!("{w}{suffix}")).collect();
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => items.concat(),
    }
}

/// The options after `settings`, checked as remap.config's would be. The
/// shape cannot change live: a limit or a rate can be changed, not added.
pub fn apply(current: &Options, settings: &[Setting]) -> Result<Options, String> {
    let mut g = Given::live(current);
    for s in settings {
        let done = match &s.value {
            Value::Text(v) => s.opt.apply(&mut g, Some(v), &()),
            Value::Switch(true) => s.opt.apply(&mut g, None, &()),
            Value::Switch(false) => g.switch_off(s.opt.name),
        };
        done.map_err(|e| format!("set: {e}"))?;
    }
    let mut o = g.finish_live();
    if current.auto.is_some() {
        // A learned limit is pinned (`limit=N`) or released (`limit=auto`)
        // by the caller (`Setting::limit_value`); the options keep the file's.
        o.auto = current.auto;
        o.limit = current.limit;
    } else if settings.iter().any(|s| s.limit_value() == Some(None)) {
        return Err(
            "set: limit=auto on a fixed limit: a limit is learned from remap.config's \
             --limit=auto, not switched live"
                .to_owned(),
        );
    }
    if current.limit.is_none() && o.limit.is_some() {
        return Err(
            "set: limit= on a limiter without a concurrency limit: a limit can be changed \
             live, not added (add --limit in remap.config)"
                .to_owned(),
        );
    }
    if current.rate.is_none() && (o.rate.is_some() || o.burst != current.burst) {
        return Err(
            "set: rate= or burst= on a limiter without a rate: a rate can be changed live, \
             not added (add --rate in remap.config)"
                .to_owned(),
        );
    }
    if o.block_s != current.block_s && o.rate.is_none() {
        return Err(
            "set: block= on a limiter without a rate: a block starts when the rate refuses \
             (add --rate in remap.config)"
                .to_owned(),
        );
    }
    if o.dry_run && o.store_counts_status() {
        return Err(format!(
            "set: dry_run=on on a limiter with --store and --count-status: {DRY_STORE_WHY}: \
             nothing changed"
        ));
    }
    if o.enforce < crate::enforce::ALL && o.store_counts_status() {
        return Err(format!(
            "set: enforce={} on a limiter with --store and --count-status: the clients left \
             out are a dry run, and {DRY_STORE_WHY}: nothing changed",
            o.enforce
        ));
    }
    if let Some(r) = o.rate {
        if f64::from(o.burst) / r > MAX_BURST_SECONDS {
            return Err(format!(
                "set: burst={} is too large for rate={r}: a full bucket may hold at most \
                 {MAX_BURST_SECONDS} s of requests",
                o.burst
            ));
        }
    }
    Ok(o)
}

/// `set TARGET` and what it takes, for the usage line.
pub fn usage() -> String {
    let words: Vec<String> = settable()
        .map(|o| match o.takes() {
            Takes::Flag => format!("{}=on|off", word(o.name)),
            _ => format!("{}=VALUE", word(o.name)),
        })
        .collect();
    format!("set GROUP|TAG {}", words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_rules_own_options_are_settable() {
        let own: Vec<&str> = settable().map(|o| o.name).collect();
        assert_eq!(names(Live::Set), own);
    }

    /// `Setting::switch_value` is the rules' dry run: no other flag is settable.
    #[test]
    fn the_only_settable_flag_is_the_dry_run() {
        let flags: Vec<&str> = settable()
            .filter(|o| o.takes() == Takes::Flag)
            .map(|o| o.name)
            .collect();
        assert_eq!(flags, ["dry-run"]);
        for f in flags {
            assert!(Given::new().switch_off(f).is_ok(), "{f}");
        }
    }
}
