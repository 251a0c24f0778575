//! The rule's parameters: `@pparam=name:value` items and `file:` includes.
//!
//! Format (loose, as the original plugin's README describes):
//! - an item is `name:value` (`name=value` is accepted too); whitespace
//!   around the name and value is ignored, and one pair of matching quotes
//!   around the whole item or the value is removed, because remap.config
//!   keeps the quotes it uses to protect spaces;
//! - a file holds one item per line; blank lines and lines starting with
//!   `#` are ignored;
//! - in the `file` value only, `\ ` and `\\` stand for a space and a backslash;
//! - a later item overrides an earlier one (so a shared file can be included
//!   first and adjusted per rule).
//!
//! The parameters are a table of the one option engine (`optspec`),
//! [`PARAMS`]: the single source of their names.
//!
//! An error names the parameter first, then the value, then where it was
//! and what is allowed: ATS keeps only ~1 KB of a diagnostic, so a long
//! value or include chain must not push the name out. Values are shown by
//! [`limits::quote`] (shortened, control characters escaped).

use std::fmt;
use std::path::{Path, PathBuf};

use adaptive::Bounds;

use auto::{bound, learned, Max};
use limits::quote::{quote, shorten, shorten_to};
use optspec::files::{Files, ReadError};
use optspec::{find, names, Names, Opt};

mod auto;
mod names;

pub use names::{default_id, escape_path, unescape_path, validate_id};
pub use optspec::files::resolve;

/// Largest accepted configuration file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Deepest chain of `file:` includes (a file including a file ...).
pub const MAX_INCLUDE_DEPTH: usize = 8;
/// Most files read for one rule: bounds diamond-shaped include graphs.
pub const MAX_FILES: usize = 64;
/// Longest accepted `id` (it becomes part of metric names).
pub const MAX_ID_LEN: usize = 200;
/// Shortest statistics interval; shorter would flood `throttle.log`.
pub const MIN_STATFREQ_MS: u32 = 100;

/// A rule's validated parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Most uncached requests in flight at once; with `max:auto`, where
    /// learning starts (20, within the bounds).
    pub max: u32,
    /// `max:auto`: the bounds of the learned max (`max-min`, `max-max`).
    pub auto: Option<Bounds>,
    /// Seconds a cached response may be served past its freshness when over `max`.
    pub stale: u32,
    /// Milliseconds between `throttle.log` lines; 0 = no lines.
    pub statfreq_ms: u32,
    /// Rule identifier in the log and metric names; `None` = derive from the rule.
    pub id: Option<String>,
}

/// Why a `file:` include was refused, as throttle has always worded it.
fn unreadable(e: ReadError) -> String {
    match e {
        ReadError::Io(e) => e.to_string(),
        ReadError::Directory => "it is a directory".to_owned(),
        ReadError::TooLarge { limit } => format!("it is larger than {limit} bytes"),
        ReadError::NotRegular { kind } => format!("it is not a regular file but {kind}"),
        ReadError::NotUtf8 { .. } => "it is not UTF-8 text".to_owned(),
    }
}

/// Where an item came from, for error messages.
#[derive(Clone, Debug)]
enum Location {
    Pparam(String),
    File {
        path: PathBuf,
        line: usize,
        parent: Box<Location>,
    },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Pparam(raw) => write!(f, "@pparam={}", shorten(raw)),
            Location::File { path, line, parent } => {
                write!(f, "{}:{line}", show_path(path))?;
                if let Location::File { .. } = **parent {
                    write!(f, " (included from {parent})")
                } else {
                    write!(f, " (from {parent})")
                }
            }
        }
    }
}

/// The parameters of a rule; its names are the ones the errors list.
static PARAMS: &[Opt<Draft, Location, String>] = &[
    Opt::value(
        "max",
        "most uncached requests in flight at once, or auto: learned from the origin's latency",
        |d, v, at| {
            d.max = Some(match v {
                "auto" => Max::Auto,
                _ => Max::Fixed(number("max", v, at, "auto or a whole number")?),
            });
            Ok(())
        },
    ),
    Opt::value(
        "max-min",
        "with max:auto, the lowest learned max (default 4)",
        |d, v, at| {
            d.auto_min = Some(bound("max-min", v, at)?);
            Ok(())
        },
    ),
    Opt::value(
        "max-max",
        "with max:auto, the highest learned max (default 1000)",
        |d, v, at| {
            d.auto_max = Some(bound("max-max", v, at)?);
            Ok(())
        },
    ),
    Opt::value(
        "stale",
        "seconds a cached response may be served past its freshness when over max",
        |d, v, at| {
            d.stale = number("stale", v, at, "a number of seconds")?;
            Ok(())
        },
    ),
    Opt::value(
        "statfreq",
        "milliseconds between throttle.log lines; 0: none",
        |d, v, at| {
            let ms = number("statfreq", v, at, "a number of milliseconds")?;
            if ms != 0 && ms < MIN_STATFREQ_MS {
                return Err(invalid(
                    "statfreq",
                    v,
                    at,
                    &format!(
                    "expected 0 (no statistics lines) or at least {MIN_STATFREQ_MS} milliseconds"
                ),
                ));
            }
            d.statfreq_ms = ms;
            Ok(())
        },
    ),
    Opt::value(
        "id",
        "the rule's name in the log and metric names",
        |d, v, at| {
            validate_id(v).map_err(|why| invalid("id", v, at, &why))?;
            d.id = Some(v.to_owned());
            Ok(())
        },
    ),
    Opt::value(
        "file",
        "a file of more parameters, one per line",
        |d, v, at| {
            let name = unescape_path(v).map_err(|why| invalid("file", v, at, &why))?;
            d.include = Some(name);
            Ok(())
        },
    ),
];

fn tables() -> [&'static dyn Names; 1] {
    [&PARAMS]
}

/// The parameters' names for a message: `max, max-min, max-max, stale, …`.
fn allowed() -> String {
    names(&tables()).collect::<Vec<_>>().join(", ")
}

/// Parses a rule's `@pparam` values. `config_dir` resolves relative `file:`
/// paths (ATS's configuration directory).
pub fn parse(options: &[&str], config_dir: &Path, files: &dyn Files) -> Result<Params, String> {
    let mut p = Parser {
        config_dir,
        files,
        stack: Vec::new(),
        files_read: 0,
        d: Draft::default(),
    };
    for raw in options {
        p.item(raw, &Location::Pparam((*raw).to_owned()))?;
    }
    let d = p.d;
    let max = d.max.ok_or_else(|| {
        "missing required parameter 'max' (the most uncached requests in flight at once, \
         e.g. @pparam=max:100, or max:auto)"
            .to_owned()
    })?;
    let (max, auto) = learned(max, d.auto_min, d.auto_max)?;
    Ok(Params {
        max,
        auto,
        stale: d.stale,
        statfreq_ms: d.statfreq_ms,
        id: d.id,
    })
}

/// The parameters read so far, and the `file` just named (read next).
#[derive(Default)]
struct Draft {
    max: Option<Max>,
    auto_min: Option<u32>,
    auto_max: Option<u32>,
    stale: u32,
    statfreq_ms: u32,
    id: Option<String>,
    include: Option<String>,
}

struct Parser<'a> {
    config_dir: &'a Path,
    files: &'a dyn Files,
    /// Identities of the files being read, outermost first.
    stack: Vec<PathBuf>,
    files_read: usize,
    d: Draft,
}

impl Parser<'_> {
    fn item(&mut self, text: &str, at: &Location) -> Result<(), String> {
        let text = unquote(text.trim());
        let Some(sep) = text.find([':', '=']) else {
            return Err(format!(
                "expected name:value, got {} at {at} (parameters: {})",
                quote(text),
                allowed()
            ));
        };
        let name = text[..sep].trim();
        let value = unquote(text[sep + 1..].trim());
        let Some((_, index, _)) = find(&tables(), name) else {
            return Err(format!(
                "unknown parameter {} at {at} (allowed: {})",
                quote(name),
                allowed()
            ));
        };
        if value.is_empty() {
            return Err(format!("parameter '{name}' has an empty value at {at}"));
        }
        PARAMS[index].apply(&mut self.d, Some(value), at)?;
        if let Some(name) = self.d.include.take() {
            self.file(value, &name, at)?;
        }
        Ok(())
    }

    /// Reads the items of the file `name` (`value` as written, for errors).
    fn file(&mut self, value: &str, name: &str, at: &Location) -> Result<(), String> {
        let bad = |why: String| invalid("file", value, at, &why);
        if self.stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(bad(format!(
                "files are included more than {MAX_INCLUDE_DEPTH} levels deep"
            )));
        }
        if self.files_read >= MAX_FILES {
            return Err(bad(format!("more than {MAX_FILES} files are included")));
        }
        let path = resolve(self.config_dir, name);
        let file = self.files.read(&path, MAX_FILE_BYTES).map_err(|e| {
            bad(format!(
                "cannot read {}: {}",
                show_path(&path),
                unreadable(e)
            ))
        })?;
        let identity = file.identity;
        if let Some(first) = self.stack.iter().position(|p| *p == identity) {
            let chain: Vec<String> = self.stack[first..]
                .iter()
                .chain(std::iter::once(&identity))
                .map(|p| show_path(p))
                .collect();
            return Err(bad(format!(
                "the file includes itself ({})",
                chain.join(" -> ")
            )));
        }
        self.files_read += 1;
        self.stack.push(identity);
        for (i, line) in file.text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let here = Location::File {
                path: path.clone(),
                line: i + 1,
                parent: Box::new(at.clone()),
            };
            self.item(line, &here)?;
        }
        self.stack.pop();
        Ok(())
    }
}

/// Removes one pair of matching quotes around `s`.
fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

/// The message for a refused value: parameter, value, location, why.
fn invalid(name: &str, value: &str, at: &Location, why: &str) -> String {
    format!(
        "parameter '{name}' has an invalid value {} at {at}: {why}",
        quote(value)
    )
}

/// A path in a message: printable, and whole unless it is absurdly long
/// (it is the value of a `file` item, maybe the 10 KB one being refused).
fn show_path(path: &Path) -> String {
    shorten_to(&path.display().to_string(), 256)
}

fn number(name: &str, value: &str, at: &Location, what: &str) -> Result<u32, String> {
    let why = if value.starts_with('-') {
        "negative values are not allowed"
    } else if !value.bytes().all(|b| b.is_ascii_digit()) {
        "not a whole number"
    } else {
        match value.parse::<u32>() {
            Ok(n) => return Ok(n),
            Err(_) => "too large",
        }
    };
    Err(invalid(
        name,
        value,
        at,
        &format!("{why}; expected {what} from 0 to {}", u32::MAX),
    ))
}

#[cfg(test)]
mod tests;
