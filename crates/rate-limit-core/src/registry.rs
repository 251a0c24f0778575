//! Which limiter each rule uses: one per `--group` name, shared by every
//! rule naming it, and carried over configuration reloads.
//!
//! A rule without `--group` has a limiter of its own, found again after a
//! reload by its identity: from URL, to URL, and its place among the
//! rate_limit entries of rules with those two URLs.
//!
//! A reload is a generation. `begin` (ATS's pre-reload) opens it; each new
//! rule `join`s, which stages its options; `commit` (the reload succeeded)
//! applies the staged options to the live limiters, and `abort` (it failed,
//! and the old rules keep serving) forgets them. Within one generation the
//! rules of a group must agree on the limiter's options: a conflict fails
//! the rule, naming the option and the other rule.
//!
//! Across generations a changed value (`--limit`, `--rate`, `--burst`,
//! `--queue`, `--maxage`) applies to the live limiter at commit; a changed
//! shape (a limit or a rate added or removed, any key option, `--conntrack`)
//! cannot carry state, so the rule gets a new limiter and the old one ends
//! with the old rules.
//!
//! The registry holds limiters weakly: rules (and their transactions) keep
//! them alive, so a group no rule names any more is freed with its last user.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::options::Options;

pub struct Registry<L> {
    generation: u64,
    /// Entries per (from, to) handed out in this generation, and whether
    /// there is more than one (see [`Registry::followed`]).
    ordinals: HashMap<(String, String), (usize, Arc<AtomicBool>)>,
    entries: HashMap<String, Entry<L>>,
}

struct Entry<L> {
    live: Weak<L>,
    /// The options the live limiter was built or last changed with.
    opts: Options,
    /// `opts` were set live ([`Registry::set_live`]), not loaded from the file.
    set_live: bool,
    /// A rule of the generation being loaded, and what it asks for.
    claim: Option<Claim<L>>,
}

struct Claim<L> {
    generation: u64,
    opts: Options,
    /// The rule that claimed first, for conflict messages.
    owner: String,
    limiter: Arc<L>,
    /// A limiter built for this generation (not the live one).
    fresh: bool,
}

/// What a commit did to one limiter, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// A new limiter (a new group or rule, or one whose shape changed:
    /// then `restarted` names the option that changed).
    Created {
        id: String,
        restarted: Option<&'static str>,
    },
    /// The live limiter took new values: `(option, old, new)`;
    /// `overrode_live`: the old ones had been set live, and the file wins.
    Changed {
        id: String,
        values: Vec<(&'static str, String, String)>,
        overrode_live: bool,
    },
}

impl Change {
    /// What the log says of it (a warning if live state was lost), if
    /// anything.
    pub fn message(&self) -> Option<(log::Level, String)> {
        match self {
            Change::Created {
                id,
                restarted: Some(option),
            } => Some((
                log::Level::Warn,
                format!(
                    "{id}: --{option} changed, which live state cannot follow: its slots, \
                     waiters and buckets start anew (the old rules keep theirs until they end)"
                ),
            )),
            Change::Created { .. } => None,
            Change::Changed {
                id,
                values,
                overrode_live,
            } => {
                let list: Vec<String> = values
                    .iter()
                    .map(|(name, old, new)| format!("--{name} {old} -> {new}"))
                    .collect();
                let why = if *overrode_live {
                    " (remap.config overrides the values set live by traffic_ctl plugin msg)"
                } else {
                    ""
                };
                Some((
                    log::Level::Info,
                    format!("{id}: applied live: {}{why}", list.join(", ")),
                ))
            }
        }
    }
}

impl<L> Default for Registry<L> {
    fn default() -> Self {
        Registry {
            generation: 0,
            ordinals: HashMap::new(),
            entries: HashMap::new(),
        }
    }
}

impl<L> Registry<L> {
    /// A configuration is about to be loaded. Claims of an earlier
    /// generation that was never committed are dropped.
    pub fn begin(&mut self) {
        self.abort();
        self.generation += 1;
        self.ordinals.clear();
    }

    /// Counts a rate_limit entry of a rule mapping `from` to `to` in this
    /// configuration: 1 for the first, 2 for a second entry on the same
    /// rule (or on another rule with the same URLs), …
    pub fn place(&mut self, from: &str, to: &str) -> usize {
        let (n, more) = self
            .ordinals
            .entry((from.to_owned(), to.to_owned()))
            .or_default();
        *n += 1;
        if *n > 1 {
            more.store(true, Ordering::Relaxed);
        }
        *n
    }

    /// Becomes true once a later entry takes a place after the first on
    /// `from`/`to` in this configuration. A first entry that is never
    /// followed can keep a smaller per-transaction state: no later entry
    /// will look for it. Entries are created before the configuration
    /// serves, so requests only ever see the final value.
    pub fn followed(&mut self, from: &str, to: &str) -> Arc<AtomicBool> {
        self.ordinals
            .entry((from.to_owned(), to.to_owned()))
            .or_default()
            .1
            .clone()
    }

    /// The limiter identity of a rule's entry (`place` from [`Registry::place`]):
    /// its group, or its own.
    pub fn identity(opts: &Options, from: &str, to: &str, place: usize) -> String {
        match &opts.group {
            Some(g) => format!("group {g}"),
            // Group names cannot contain spaces, so these never collide.
            None => format!("rule {from} {to} #{place}"),
        }
    }

    /// The limiter for a new rule with identity `id`: the live one if its
    /// shape fits, else one made by `make`. `owner` names the rule in
    /// conflict messages.
    pub fn join(
        &mut self,
        id: &str,
        opts: &Options,
        owner: &str,
        make: impl FnOnce(&Options) -> Arc<L>,
    ) -> Result<Arc<L>, String> {
        let generation = self.generation;
        if let Some(c) = self
            .entries
            .get(id)
            .and_then(|e| e.claim.as_ref())
            .filter(|c| c.generation == generation)
        {
            if let Some((name, mine, theirs)) = difference(opts, &c.opts, &[]) {
                return Err(format!(
                    "--{name}={mine} conflicts with --{name}={theirs} of the rule {} in the same \
                     --group={}: rules of a group share one limiter and must agree on its options",
                    c.owner,
                    opts.group.as_deref().unwrap_or("")
                ));
            }
            return Ok(c.limiter.clone());
        }
        let entry = self.entries.entry(id.to_owned()).or_insert_with(|| Entry {
            live: Weak::new(),
            opts: opts.clone(),
            set_live: false,
            claim: None,
        });
        let reuse = entry
            .live
            .upgrade()
            .filter(|_| difference(opts, &entry.opts, &live_options()).is_none());
        let (limiter, fresh) = match reuse {
            Some(l) => (l, false),
            None => (make(opts), true),
        };
        entry.claim = Some(Claim {
            generation,
            opts: opts.clone(),
            owner: owner.to_owned(),
            limiter: limiter.clone(),
            fresh,
        });
        Ok(limiter)
    }

    /// The loaded configuration serves now: its claims become the live
    /// limiters, and `apply` gives changed values to live ones. Returns what
    /// changed.
    pub fn commit(&mut self, mut apply: impl FnMut(&L, &Options)) -> Vec<Change> {
        let mut changes = Vec::new();
        let generation = self.generation;
        for (id, e) in &mut self.entries {
            let Some(c) = e.claim.take_if(|c| c.generation == generation) else {
                continue;
            };
            if c.fresh {
                let had_live = e.live.strong_count() > 0;
                changes.push(Change::Created {
                    id: id.clone(),
                    restarted: had_live
                        .then(|| difference(&c.opts, &e.opts, &live_options()).map(|d| d.0))
                        .flatten(),
                });
                e.live = Arc::downgrade(&c.limiter);
            } else {
                let values: Vec<_> = c
                    .opts
                    .limiter_options()
                    .into_iter()
                    .zip(e.opts.limiter_options())
                    .filter(|((_, new), (_, old))| new != old)
                    .map(|((name, new), (_, old))| (name, old, new))
                    .collect();
                if !values.is_empty() {
                    apply(&c.limiter, &c.opts);
                    changes.push(Change::Changed {
                        id: id.clone(),
                        values,
                        overrode_live: e.set_live,
                    });
                }
            }
            e.opts = c.opts;
            e.set_live = false;
        }
        self.entries
            .retain(|_, e| e.claim.is_some() || e.live.strong_count() > 0);
        changes
    }

    /// The loaded configuration was refused: forget its claims (its rules
    /// are deleted; limiters made for them end with them).
    pub fn abort(&mut self) {
        for e in self.entries.values_mut() {
            e.claim = None;
        }
        self.entries.retain(|_, e| e.live.strong_count() > 0);
    }

    /// Live limiters by identity (groups and rules), with the options in
    /// force, for reports and live changes.
    pub fn live(&self) -> Vec<(String, Arc<L>, Options)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .filter_map(|(id, e)| e.live.upgrade().map(|l| (id.clone(), l, e.opts.clone())))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Records options set live (`traffic_ctl plugin msg … set`), so that
    /// the next load of remap.config, which compares against them, puts the
    /// file's values back. False if `id` has no live limiter.
    pub fn set_live(&mut self, id: &str, opts: Options) -> bool {
        match self.entries.get_mut(id) {
            Some(e) if e.live.strong_count() > 0 => {
                e.opts = opts;
                e.set_live = true;
                true
            }
            _ => false,
        }
    }
}

/// Options whose value can change on a live limiter (the tables say which).
fn live_options() -> Vec<&'static str> {
    crate::options::live::names(optspec::Live::Reload)
}

/// The first limiter option (not in `ignore`) whose values differ: its
/// name, `a`'s value and `b`'s. A limit or rate added or removed counts
/// even when ignored: that changes the limiter's shape. Of `--count-status`
/// only its presence is the shape (each rule charges by its own list, see
/// the plugin's charge.rs): a list change keeps the limiter and its
/// lock-outs, and rules of a group may list different statuses.
fn difference(a: &Options, b: &Options, ignore: &[&str]) -> Option<(&'static str, String, String)> {
    if a.limit.is_some() != b.limit.is_some() || a.auto.is_some() != b.auto.is_some() {
        return Some(render("limit", a, b));
    }
    if a.rate.is_some() != b.rate.is_some() {
        return Some(render("rate", a, b));
    }
    if a.count_status.is_some() != b.count_status.is_some() {
        return Some(render("count-status", a, b));
    }
    a.limiter_options()
        .into_iter()
        .zip(b.limiter_options())
        .find(|((name, x), (_, y))| x != y && *name != "count-status" && !ignore.contains(name))
        .map(|((name, x), (_, y))| (name, x, y))
}

fn render(name: &'static str, a: &Options, b: &Options) -> (&'static str, String, String) {
    let value = |o: &Options| {
        o.limiter_options()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap_or_default()
    };
    (name, value(a), value(b))
}

#[cfg(test)]
mod tests;
