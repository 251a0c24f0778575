//! The one option engine of the workspace (issue 22 item 1).
//!
//! A module declares its options once, in a table of [`Opt`]s: the name, a
//! docs line, and a [`Setter`] that says what the option takes (a flag, a
//! value, or either) and applies it to the module's own target `T`. The
//! table is the single source of the module's names: the tokenizer
//! ([`Tokens`]) finds options in it, the unknown-option message lists it
//! ([`known`]), and each front end's test checks its docs against it.
//!
//! The engine owns no wording of its own beyond the shared syntax errors
//! ([`SyntaxError`]): a setter's error type `E` and its messages are the
//! module's. The value helpers ([`value`]) return typed reasons, so each
//! front end keeps its wording too.
//!
//! - `tokens`: `--name=value` / `--name value` arguments, one at a time;
//! - `value`: whole numbers in a range, seconds, comma lists, CIDRs, bool words;
//! - `files`: the bounded file reader.

#![forbid(unsafe_code)]

pub mod files;
mod tokens;
pub mod value;

pub use tokens::{Given, Repeats, SyntaxError, Tokens};

/// What an option takes, and the function that applies it to a `T`. `C` is
/// what the setter may need besides the value (where the option came from,
/// the config dir, other options already known); `E` is the module's error.
pub enum Setter<T, C, E> {
    /// `--name` alone.
    Flag(fn(&mut T, &C) -> Result<(), E>),
    /// `--name=value` or `--name value`.
    Value(fn(&mut T, &str, &C) -> Result<(), E>),
    /// `--name` alone or `--name=value` (never the next argument): `None`
    /// when no value was given, `Some("")` for `--name=`.
    FlagOrValue(fn(&mut T, Option<&str>, &C) -> Result<(), E>),
}

/// What an option takes, without its setter (for the tokenizer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    Flag,
    Value,
    FlagOrValue,
}

/// Whether a running instance takes a new value of the option, keeping its
/// state. The table says it once; a front end derives from it what a reload
/// may change in place and what its live `set` command accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Live {
    /// A new value needs a new instance (its state starts over).
    No,
    /// A configuration reload changes it on the running instance.
    Reload,
    /// So does the front end's live `set NAME=VALUE` command.
    Set,
}

/// One option of a module's table.
pub struct Opt<T, C, E> {
    /// Without the leading `--`.
    pub name: &'static str,
    /// One line for the docs: what the option does.
    pub doc: &'static str,
    pub set: Setter<T, C, E>,
    /// [`Live::No`] unless the table says otherwise ([`Opt::live`]).
    pub live: Live,
}

impl<T, C, E> Opt<T, C, E> {
    pub const fn flag(
        name: &'static str,
        doc: &'static str,
        set: fn(&mut T, &C) -> Result<(), E>,
    ) -> Self {
        Opt {
            name,
            doc,
            set: Setter::Flag(set),
            live: Live::No,
        }
    }

    pub const fn value(
        name: &'static str,
        doc: &'static str,
        set: fn(&mut T, &str, &C) -> Result<(), E>,
    ) -> Self {
        Opt {
            name,
            doc,
            set: Setter::Value(set),
            live: Live::No,
        }
    }

    pub const fn flag_or_value(
        name: &'static str,
        doc: &'static str,
        set: fn(&mut T, Option<&str>, &C) -> Result<(), E>,
    ) -> Self {
        Opt {
            name,
            doc,
            set: Setter::FlagOrValue(set),
            live: Live::No,
        }
    }

    /// The option as one a running instance takes ([`Live`]).
    pub const fn live(mut self, live: Live) -> Self {
        self.live = live;
        self
    }

    pub fn takes(&self) -> Takes {
        match self.set {
            Setter::Flag(_) => Takes::Flag,
            Setter::Value(_) => Takes::Value,
            Setter::FlagOrValue(_) => Takes::FlagOrValue,
        }
    }

    /// Applies the option with `value` as the tokenizer gave it (`None`
    /// for a flag; a value option without one gets "").
    pub fn apply(&self, target: &mut T, value: Option<&str>, cx: &C) -> Result<(), E> {
        match self.set {
            Setter::Flag(f) => f(target, cx),
            Setter::Value(f) => f(target, value.unwrap_or(""), cx),
            Setter::FlagOrValue(f) => f(target, value, cx),
        }
    }
}

/// A table seen only by its names and what each takes, so the tokenizer
/// can look across tables of different targets: `&[&RULE, &PEERS]` for
/// `static RULE: &[Opt<..>]`.
pub trait Names {
    fn count(&self) -> usize;
    fn name(&self, i: usize) -> &'static str;
    fn takes(&self, i: usize) -> Takes;
    fn live(&self, i: usize) -> Live;
    /// The index of `name`, the name as the table holds it, and what it
    /// takes (one call per table, not per name: the parse is config-time,
    /// but runs once per rule).
    fn position(&self, name: &str) -> Option<(usize, &'static str, Takes)>;
}

impl<T, C, E> Names for &[Opt<T, C, E>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn name(&self, i: usize) -> &'static str {
        self[i].name
    }
    fn takes(&self, i: usize) -> Takes {
        self[i].takes()
    }
    fn live(&self, i: usize) -> Live {
        self[i].live
    }
    fn position(&self, name: &str) -> Option<(usize, &'static str, Takes)> {
        self.iter()
            .enumerate()
            .find(|(_, o)| o.name == name)
            .map(|(i, o)| (i, o.name, o.takes()))
    }
}

/// Where a name is: `(table, index in it, what it takes)`; the first table
/// that has it wins (a test per front end keeps names unique).
pub fn find(tables: &[&dyn Names], name: &str) -> Option<(usize, usize, Takes)> {
    locate(tables, name).map(|(t, i, _, takes)| (t, i, takes))
}

/// [`find`], with the name as the table holds it (`'static`).
pub(crate) fn locate(
    tables: &[&dyn Names],
    name: &str,
) -> Option<(usize, usize, &'static str, Takes)> {
    tables.iter().enumerate().find_map(|(t, table)| {
        table
            .position(name)
            .map(|(i, name, takes)| (t, i, name, takes))
    })
}

/// Every name of `tables`, in table order.
pub fn names<'t>(tables: &'t [&'t dyn Names]) -> impl Iterator<Item = &'static str> + 't {
    tables
        .iter()
        .flat_map(|table| (0..table.count()).map(move |i| table.name(i)))
}

/// The known options for a message: `--a, --b, --c`.
pub fn known(tables: &[&dyn Names]) -> String {
    let mut out = String::new();
    for name in names(tables) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str("--");
        out.push_str(name);
    }
    out
}

/// Names given twice across `tables`, for each front end's uniqueness test.
pub fn duplicates(tables: &[&dyn Names]) -> Vec<&'static str> {
    let all: Vec<&'static str> = names(tables).collect();
    let mut dup: Vec<&'static str> = Vec::new();
    for (i, n) in all.iter().enumerate() {
        if all[..i].contains(n) && !dup.contains(n) {
            dup.push(n);
        }
    }
    dup
}

#[cfg(test)]
mod tests;

/// What the docs' table of a front end's options documents, sorted: in the
/// section `## SECTION` of `markdown`, the code text of each row's first
/// cell that starts `` | `PREFIX ``, less the prefix. Each front end's test
/// compares it with its tables, so an option documented and not known, or
/// known and not documented, fails there. `None`: no such section.
pub fn documented<'m>(markdown: &'m str, section: &str, prefix: &str) -> Option<Vec<&'m str>> {
    let mut cells = documented_in_order(markdown, section, prefix)?;
    cells.sort_unstable();
    Some(cells)
}

/// [`documented`], in the docs' order: a front end whose messages list its
/// options in table order keeps its docs in that order too.
pub fn documented_in_order<'m>(
    markdown: &'m str,
    section: &str,
    prefix: &str,
) -> Option<Vec<&'m str>> {
    let body = markdown
        .split("\n## ")
        .find(|s| s.strip_prefix(section).is_some_and(|r| r.starts_with('\n')))?;
    let row = format!("| `{prefix}");
    let cells = body
        .lines()
        .filter_map(|l| l.strip_prefix(row.as_str())?.split_once('`'))
        .map(|(cell, _)| cell)
        .collect();
    Some(cells)
}
