//! `@pparam` arguments, one option at a time: `--name=value`, `--name value`
//! (the next argument is the value, unless it starts with `--`: then it is
//! an option, and the value is missing), `--name` for a flag. Upstream's syntax
//! (getopt_long), shared by rate_limit.so and ip_throttle.so.
//!
//! An iterator, so a front end applies each option as it comes and the
//! first mistake in the arguments, whether of syntax or of value, is the
//! one reported.

use quoting::quote;

use crate::{known, locate, Names, Takes};

/// Whether an option may be given more than once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeats {
    /// A second time is [`SyntaxError::Repeated`] (rate_limit.so).
    Refuse,
    /// Each is handed on; the later value overrides (ip_throttle.so).
    Override,
}

/// One option found: where it is in the tables and its value as given
/// (`None` for a flag, or a flag-or-value option without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Given<'a> {
    /// Index into the tables handed to [`Tokens::new`].
    pub table: usize,
    /// Index of the option in its table.
    pub index: usize,
    pub name: &'static str,
    pub value: Option<&'a str>,
}

/// A mistake of syntax, before any value is looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyntaxError<'a> {
    /// An argument not starting with `--`.
    Unexpected(&'a str),
    /// `--name` that no table has (the whole argument).
    Unknown(&'a str),
    /// Given again under [`Repeats::Refuse`].
    Repeated(&'static str),
    /// A value option last, without `=value`.
    NeedsValue(&'static str),
    /// A flag given `=value`.
    TakesNoValue(&'static str, &'a str),
    /// A value option whose next argument, taken as its value, is an
    /// option (`--log --dry-run`): refused, or that option would be lost.
    ValueIsOption(&'static str, &'a str),
}

impl SyntaxError<'_> {
    /// The shared wording; `tables` are the ones tokenized, for the list of
    /// known options. Values are quoted ([`quote`]): short and printable.
    pub fn message(&self, tables: &[&dyn Names]) -> String {
        match self {
            SyntaxError::Unexpected(arg) => format!(
                "unexpected argument {}: options are --name=value; known options: {}",
                quote(arg),
                known(tables)
            ),
            SyntaxError::Unknown(arg) => format!(
                "unknown option {}; known options: {}",
                quote(arg),
                known(tables)
            ),
            SyntaxError::Repeated(name) => format!("--{name} given more than once"),
            SyntaxError::NeedsValue(name) => format!("--{name} needs a value (--{name}=VALUE)"),
            SyntaxError::TakesNoValue(name, v) => {
                format!("--{name} takes no value (got {})", quote(v))
            }
            SyntaxError::ValueIsOption(name, v) => format!(
                "--{name} needs a value, and the next argument {} is an option: \
                 write --{name}=VALUE",
                quote(v)
            ),
        }
    }
}

/// The options of `args`, in order; stops after the first error.
pub struct Tokens<'a, 't> {
    args: &'a [&'a str],
    next: usize,
    tables: &'t [&'t dyn Names],
    repeats: Repeats,
    seen: Vec<&'static str>,
}

impl<'a, 't> Tokens<'a, 't> {
    pub fn new(args: &'a [&'a str], tables: &'t [&'t dyn Names], repeats: Repeats) -> Self {
        Tokens {
            args,
            next: 0,
            tables,
            repeats,
            // One allocation: at most one name an argument.
            seen: Vec::with_capacity(args.len()),
        }
    }

    /// Consumes the tokenizer, keeping what it saw.
    pub fn into_seen(self) -> Vec<&'static str> {
        self.seen
    }

    fn step(&mut self) -> Result<Given<'a>, SyntaxError<'a>> {
        let arg = self.args[self.next];
        self.next += 1;
        let body = arg.strip_prefix("--").ok_or(SyntaxError::Unexpected(arg))?;
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let (table, index, name, takes) =
            locate(self.tables, name).ok_or(SyntaxError::Unknown(arg))?;
        if self.seen.contains(&name) {
            if self.repeats == Repeats::Refuse {
                return Err(SyntaxError::Repeated(name));
            }
        } else {
            self.seen.push(name);
        }
        let value = match (takes, inline) {
            (Takes::Flag, Some(v)) => return Err(SyntaxError::TakesNoValue(name, v)),
            (Takes::Flag, None) => None,
            (Takes::FlagOrValue, v) | (Takes::Value, v @ Some(_)) => v,
            (Takes::Value, None) => {
                let v = self
                    .args
                    .get(self.next)
                    .ok_or(SyntaxError::NeedsValue(name))?;
                if v.starts_with("--") {
                    return Err(SyntaxError::ValueIsOption(name, v));
                }
                self.next += 1;
                Some(*v)
            }
        };
        Ok(Given {
            table,
            index,
            name,
            value,
        })
    }
}

impl<'a> Iterator for Tokens<'a, '_> {
    type Item = Result<Given<'a>, SyntaxError<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.args.len() {
            return None;
        }
        let item = self.step();
        if item.is_err() {
            // Fused: nothing after the first mistake.
            self.next = self.args.len();
        }
        Some(item)
    }
}
