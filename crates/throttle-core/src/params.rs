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

use limits::quote::{quote, shorten, shorten_to};
use optspec::files::{Files, ReadError};
use optspec::{find, names, Names, Opt};

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
    /// Most uncached requests in flight at once.
    pub max: u32,
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
        "most uncached requests in flight at once",
        |d, v, at| {
            d.max = Some(number("max", v, at, "a whole number")?);
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

/// The parameters' names for a message: `max, stale, statfreq, id, file`.
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
         e.g. @pparam=max:100)"
            .to_owned()
    })?;
    Ok(Params {
        max,
        stale: d.stale,
        statfreq_ms: d.statfreq_ms,
        id: d.id,
    })
}

/// The parameters read so far, and the `file` just named (read next).
#[derive(Default)]
struct Draft {
    max: Option<u32>,
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

/// Checks an `id`: it is written into log lines and metric names.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("it is empty".into());
    }
    if id.chars().any(char::is_whitespace) {
        return Err("it may not contain spaces".into());
    }
    if id.chars().any(char::is_control) {
        return Err("it may not contain control characters".into());
    }
    if id.starts_with('-') {
        return Err("it may not start with '-'".into());
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!("it is longer than {MAX_ID_LEN} bytes"));
    }
    Ok(())
}

/// Decodes the `file` escapes: `\ ` is a space, `\\` a backslash.
pub fn unescape_path(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(' ') => out.push(' '),
            Some('\\') => out.push('\\'),
            Some(other) => {
                return Err(format!(
                    "unsupported escape {} (only '\\ ' for a space and '\\\\' for a \
                     backslash)",
                    quote(&format!("\\{other}"))
                ))
            }
            None => {
                return Err(
                    "it ends with a lone '\\'; remap.config splits parameters at \
                            spaces even after a backslash, so quote the whole parameter, e.g. \
                            @pparam=\"file:my\\ file.config\""
                        .into(),
                )
            }
        }
    }
    if out.is_empty() {
        return Err("the file name is empty".into());
    }
    Ok(out)
}

/// The inverse of [`unescape_path`].
pub fn escape_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == ' ' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Resolves a `file` name: relative names are relative to the config directory.
pub fn resolve(config_dir: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config_dir.join(p)
    }
}

/// The id of a rule without an `id` parameter: its from-URL without the
/// scheme and trailing slash, other characters than letters, digits, `.`,
/// `-` and `_` replaced by `_` (`http://cdn.test/a/` gives `cdn.test_a`).
pub fn default_id(from_url: &str) -> String {
    let rest = from_url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(from_url);
    let rest = rest.trim_end_matches('/');
    let mut id: String = rest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    id.truncate(MAX_ID_LEN);
    if id.is_empty() {
        id.push_str("throttle");
    }
    // An id may not start with '-' (it would read as an option).
    if id.starts_with('-') {
        id.replace_range(..1, "_");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    use optspec::files::{FsFiles, MemFiles as Mem};

    const DIR: &str = "/etc/ts";

    fn run(opts: &[&str], mem: &Mem) -> Result<Params, String> {
        parse(opts, Path::new(DIR), mem)
    }

    fn ok(opts: &[&str]) -> Params {
        run(opts, &Mem::default()).expect("valid")
    }

    fn err(opts: &[&str], mem: &Mem) -> String {
        run(opts, mem).expect_err("invalid")
    }

    #[test]
    fn defaults_and_all_params() {
        assert_eq!(
            ok(&["max:5"]),
            Params {
                max: 5,
                stale: 0,
                statfreq_ms: 0,
                id: None
            }
        );
        assert_eq!(
            ok(&["max:2000", "stale:3600", "statfreq:10000", "id:example-01"]),
            Params {
                max: 2000,
                stale: 3600,
                statfreq_ms: 10000,
                id: Some("example-01".into())
            }
        );
    }

    #[test]
    fn loose_forms() {
        assert_eq!(ok(&[" max = 7 "]).max, 7);
        assert_eq!(ok(&["\"max:7\""]).max, 7);
        assert_eq!(ok(&["max:'7'"]).max, 7);
        assert_eq!(ok(&["max:0"]).max, 0);
        assert_eq!(ok(&["max:4294967295"]).max, u32::MAX);
    }

    #[test]
    fn later_items_override_earlier_ones() {
        let mem = Mem::default().with("/etc/ts/base.config", "max:10\nstale:5\n");
        let p = run(&["file:base.config", "max:3"], &mem).expect("valid");
        assert_eq!((p.max, p.stale), (3, 5));
        let p = run(&["max:3", "file:base.config"], &mem).expect("valid");
        assert_eq!(p.max, 10);
    }

    #[test]
    fn missing_max() {
        let e = err(&["stale:10"], &Mem::default());
        assert!(e.contains("missing required parameter 'max'"), "{e}");
        let e = err(&[], &Mem::default());
        assert!(e.contains("'max'"), "{e}");
    }

    #[test]
    fn bad_numbers_name_param_and_value() {
        let cases = [
            (
                "max:abc",
                "parameter 'max' has an invalid value 'abc' at @pparam=max:abc: not a whole number",
            ),
            (
                "max:-1",
                "parameter 'max' has an invalid value '-1' at @pparam=max:-1: negative values",
            ),
            ("stale:1.5", "parameter 'stale' has an invalid value '1.5'"),
            (
                "stale:0x10",
                "parameter 'stale' has an invalid value '0x10'",
            ),
            (
                "statfreq:99999999999",
                "parameter 'statfreq' has an invalid value '99999999999'",
            ),
            ("max:+3", "parameter 'max' has an invalid value '+3'"),
            (
                "statfreq:50",
                "parameter 'statfreq' has an invalid value '50' at @pparam=statfreq:50: \
                 expected 0 (no statistics lines) or at least 100",
            ),
            ("max:", "parameter 'max' has an empty value at @pparam=max:"),
            ("max", "expected name:value, got 'max' at @pparam=max"),
        ];
        for (opt, want) in cases {
            let e = err(&["max:1", opt], &Mem::default());
            assert!(e.contains(want), "{opt}: {e}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(
            ok(&["max:1", "id:a.b-c_d/1"]).id.as_deref(),
            Some("a.b-c_d/1")
        );
        let e = err(&["max:1", "id:\"a b\""], &Mem::default());
        assert!(
            e.starts_with("parameter 'id' has an invalid value 'a b'") && e.contains("spaces"),
            "{e}"
        );
        let long = format!("id:{}", "x".repeat(MAX_ID_LEN + 1));
        assert!(err(&["max:1", &long], &Mem::default()).contains("longer than"));
        // A name never starts with '-' (issue 30: names that look like options).
        let e = err(&["max:1", "id:--dry"], &Mem::default());
        assert!(e.ends_with("it may not start with '-'"), "{e}");
    }

    #[test]
    fn unknown_parameter_lists_allowed() {
        let e = err(&["max:1", "maximum:3"], &Mem::default());
        assert_eq!(
            e,
            "unknown parameter 'maximum' at @pparam=maximum:3 (allowed: max, stale, statfreq, id, file)"
        );
    }

    /// The table is the single source of the parameters' names: both
    /// messages that list them list exactly its names, each is known, and
    /// none is there twice.
    #[test]
    fn the_table_is_the_single_source_of_names() {
        assert_eq!(optspec::duplicates(&tables()), Vec::<&str>::new());
        let want: Vec<&str> = names(&tables()).collect();
        let e = err(&["max:1", "bogus:3"], &Mem::default());
        let listed = e
            .strip_prefix("unknown parameter 'bogus' at @pparam=bogus:3 (allowed: ")
            .and_then(|l| l.strip_suffix(')'))
            .expect(&e);
        assert_eq!(listed.split(", ").collect::<Vec<_>>(), want);
        let e = err(&["bogus"], &Mem::default());
        let listed = e
            .strip_prefix("expected name:value, got 'bogus' at @pparam=bogus (parameters: ")
            .and_then(|l| l.strip_suffix(')'))
            .expect(&e);
        assert_eq!(listed.split(", ").collect::<Vec<_>>(), want);
        for name in &want {
            let e = err(&[&format!("{name}:")], &Mem::default());
            assert_eq!(
                e,
                format!("parameter '{name}' has an empty value at @pparam={name}:")
            );
        }
    }

    /// The parameter table of docs/throttle.md lists exactly the table's names.
    #[test]
    fn the_docs_list_exactly_the_tables_names() {
        let md = include_str!("../../../docs/throttle.md");
        let documented = optspec::documented(md, "Parameters", "").expect("a Parameters section");
        let mut known: Vec<&str> = names(&tables()).collect();
        known.sort_unstable();
        assert_eq!(documented, known);
    }

    #[test]
    fn file_lines_comments_and_relative_paths() {
        let mem = Mem::default()
            .with(
                "/etc/ts/example 01 throttle.config",
                "# comment\n\nid:example-01\n  max:2000\nstale:3600\r\nstatfreq:10000\n",
            )
            .with("/abs/t.config", "max:9\n");
        let p = run(&[r"file:example\ 01\ throttle.config"], &mem).expect("valid");
        assert_eq!(p.max, 2000);
        assert_eq!(p.id.as_deref(), Some("example-01"));
        assert_eq!(p.statfreq_ms, 10000);
        let p = run(&["\"file:example\\ 01\\ throttle.config\""], &mem).expect("quoted");
        assert_eq!(p.max, 2000);
        assert_eq!(run(&["file:/abs/t.config"], &mem).expect("abs").max, 9);
    }

    #[test]
    fn errors_in_files_name_file_and_line() {
        let mem = Mem::default()
            .with("/etc/ts/a.config", "max:1\n\nstale:soon\n")
            .with("/etc/ts/outer.config", "id:x\nfile:a.config\n");
        let e = err(&["file:outer.config"], &mem);
        assert_eq!(
            e,
            "parameter 'stale' has an invalid value 'soon' at /etc/ts/a.config:3 (included from \
             /etc/ts/outer.config:2 (from @pparam=file:outer.config)): not a whole number; \
             expected a number of seconds from 0 to 4294967295"
        );
        let mem = Mem::default().with("/etc/ts/u.config", "max:1\nbogus:2\n");
        let e = err(&["file:u.config"], &mem);
        assert!(
            e.contains("unknown parameter 'bogus' at /etc/ts/u.config:2"),
            "{e}"
        );
    }

    #[test]
    fn unreadable_file() {
        let e = err(&["max:1", "file:nope.config"], &Mem::default());
        assert!(
            e.starts_with("parameter 'file' has an invalid value 'nope.config' at @pparam=file:nope.config: cannot read /etc/ts/nope.config: No such file"),
            "{e}"
        );
    }

    /// The bounded reader's refusals keep throttle's wording.
    #[test]
    fn refused_files_say_why() {
        let mem = Mem::default()
            .with_bytes("/etc/ts/latin1", b"max:1\n\xe9")
            .with_dir("/etc/ts/d");
        assert_eq!(
            err(&["max:1", "file:latin1"], &mem),
            "parameter 'file' has an invalid value 'latin1' at @pparam=file:latin1: cannot read \
             /etc/ts/latin1: it is not UTF-8 text"
        );
        assert_eq!(
            err(&["max:1", "file:d"], &mem),
            "parameter 'file' has an invalid value 'd' at @pparam=file:d: cannot read /etc/ts/d: \
             it is a directory"
        );
    }

    #[test]
    fn split_escape_gets_a_hint() {
        let e = err(&["max:1", r"file:example\"], &Mem::default());
        assert!(
            e.contains("ends with a lone '\\'") && e.contains("quote"),
            "{e}"
        );
        let e = err(&["max:1", r"file:a\tb"], &Mem::default());
        assert!(e.contains("unsupported escape '\\t'"), "{e}");
    }

    #[test]
    fn self_inclusion_is_refused() {
        let mem = Mem::default()
            .with("/etc/ts/a.config", "max:1\nfile:b.config\n")
            .with("/etc/ts/b.config", "file:a.config\n");
        let e = err(&["file:a.config"], &mem);
        assert!(
            e.contains(
                "includes itself (/etc/ts/a.config -> /etc/ts/b.config -> /etc/ts/a.config)"
            ),
            "{e}"
        );
        let mem = Mem::default().with("/etc/ts/s.config", "file:s.config\n");
        assert!(err(&["file:s.config"], &mem).contains("includes itself"));
    }

    #[test]
    fn repeated_non_cyclic_includes_are_fine() {
        let mem = Mem::default()
            .with("/etc/ts/common", "stale:4\n")
            .with("/etc/ts/a", "file:common\nfile:common\nmax:2\n");
        assert_eq!(run(&["file:a", "file:common"], &mem).expect("ok").stale, 4);
    }

    #[test]
    fn depth_and_count_are_bounded() {
        let mut mem = Mem::default();
        for i in 0..=MAX_INCLUDE_DEPTH {
            mem = mem.with(&format!("/etc/ts/f{i}"), &format!("file:f{}\n", i + 1));
        }
        mem = mem.with(&format!("/etc/ts/f{}", MAX_INCLUDE_DEPTH + 1), "max:1\n");
        assert!(err(&["file:f0"], &mem).contains("levels deep"));

        // A doubling include graph: each level includes the next twice.
        let mut mem = Mem::default();
        for i in 0..7 {
            mem = mem.with(
                &format!("/etc/ts/d{i}"),
                &format!("file:d{0}\nfile:d{0}\n", i + 1),
            );
        }
        mem = mem.with("/etc/ts/d7", "max:1\n");
        assert!(err(&["file:d0"], &mem).contains("more than 64 files"));
    }

    #[test]
    fn oversized_file() {
        let big = "#".repeat(MAX_FILE_BYTES as usize + 1);
        let mem = Mem::default().with("/etc/ts/big", &big);
        assert!(err(&["max:1", "file:big"], &mem).contains("larger than 1048576 bytes"));
    }

    #[test]
    fn fs_source_reads_and_bounds() {
        let dir = std::env::temp_dir().join(format!("throttle-core-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        std::fs::write(dir.join("with space.config"), "max:4\n").expect("write");
        std::fs::write(dir.join("big"), vec![b'#'; 2000]).expect("write");
        let p = parse(&[r"file:with\ space.config"], &dir, &FsFiles).expect("ok");
        assert_eq!(p.max, 4);
        let e = unreadable(FsFiles.read(&dir.join("big"), 1000).expect_err("too big"));
        assert!(e.contains("larger than 1000"), "{e}");
        assert!(unreadable(FsFiles.read(&dir, 1000).expect_err("dir")).contains("directory"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn default_ids() {
        assert_eq!(default_id("http://t.test/"), "t.test");
        assert_eq!(default_id("https://a.com:8080/x/y/"), "a.com_8080_x_y");
        assert_eq!(default_id("http:///"), "throttle");
        assert_eq!(default_id("http://-x.test/"), "_x.test");
        assert_eq!(default_id("-"), "_");
        assert!(validate_id(&default_id("http://a b\tc/")).is_ok());
    }

    /// ATS keeps ~1 KB of a diagnostic: a long value must not push the
    /// parameter's name (or what is allowed) out of it.
    #[test]
    fn long_values_come_after_the_parameter_and_are_shortened() {
        let digits = "9".repeat(10240);
        let shown = "9".repeat(limits::quote::MAX_SHOWN_CHARS);
        let e = err(&[&format!("max:{digits}")], &Mem::default());
        assert_eq!(
            e,
            format!(
                "parameter 'max' has an invalid value '{shown}…' (10240 bytes) at \
                 @pparam=max:{}… (10244 bytes): too large; expected a whole number from 0 to \
                 4294967295",
                &shown[4..]
            )
        );
        let spaced = format!("{} {}", "x", "y".repeat(10240));
        for name in ["max", "stale", "statfreq", "id", "file"] {
            for value in [&digits, &spaced] {
                let opt = format!("{name}:{value}");
                let Err(e) = run(&["max:1", &opt], &Mem::default()) else {
                    panic!("{name} accepted");
                };
                assert!(
                    e.starts_with(&format!("parameter '{name}' has an invalid value '")),
                    "{e}"
                );
                // With ATS's own prefix, well under the ~1 KB it keeps.
                assert!(e.len() < 700, "{e}");
            }
        }
        // The same from a file: file and line instead of the @pparam.
        let mem = Mem::default().with("/etc/ts/big.config", &format!("max:{digits}\n"));
        let e = err(&["file:big.config"], &mem);
        assert!(
            e.starts_with(&format!(
                "parameter 'max' has an invalid value '{shown}…' (10240 bytes) at \
                 /etc/ts/big.config:1 (from @pparam=file:big.config): too large"
            )),
            "{e}"
        );
        let e = err(&[&format!("{digits}:1")], &Mem::default());
        assert!(
            e.starts_with(&format!("unknown parameter '{shown}…' (10240 bytes) at")),
            "{e}"
        );
        assert!(e.len() < 400, "{e}");
    }

    /// A NUL or other control character would end (or break) the C string
    /// ATS logs: the message shows it escaped and goes on past it.
    #[test]
    fn control_characters_are_escaped() {
        let mem = Mem::default().with("/etc/ts/nul.config", "max:1\nstale:1\0\n");
        assert_eq!(
            err(&["file:nul.config"], &mem),
            "parameter 'stale' has an invalid value '1\\0' at /etc/ts/nul.config:2 (from \
             @pparam=file:nul.config): not a whole number; expected a number of seconds from 0 \
             to 4294967295"
        );
        let e = err(&["max:1", "id:a\u{1b}b"], &Mem::default());
        assert!(
            e.starts_with(
                "parameter 'id' has an invalid value 'a\\u{1b}b' at @pparam=id:a\\u{1b}b:"
            ),
            "{e}"
        );
        let e = err(&["max:1", "file:a\u{1}b"], &Mem::default());
        assert!(e.contains("cannot read /etc/ts/a\\u{1}b:"), "{e}");
        let e = err(&["max:1", "file:a\\\u{7}"], &Mem::default());
        assert!(e.contains("unsupported escape '\\\\u{7}'"), "{e}");
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn never_panics(opts in proptest::collection::vec(".{0,40}", 0..6)) {
                let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
                let _ = run(&refs, &Mem::default());
            }

            #[test]
            fn valid_params_round_trip(
                max in any::<u32>(),
                stale in any::<u32>(),
                freq in prop_oneof![Just(0u32), MIN_STATFREQ_MS..=u32::MAX],
                id in "[A-Za-z0-9._/][A-Za-z0-9._/-]{0,29}",
                eq in any::<bool>(),
            ) {
                let sep = if eq { "=" } else { ":" };
                let opts = [
                    format!("max{sep}{max}"),
                    format!("stale{sep}{stale}"),
                    format!("statfreq{sep}{freq}"),
                    format!("id{sep}{id}"),
                ];
                let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
                let p = run(&refs, &Mem::default()).expect("valid");
                prop_assert_eq!(p, Params { max, stale, statfreq_ms: freq, id: Some(id) });
            }

            #[test]
            fn same_params_from_a_file(max in any::<u32>(), stale in any::<u32>(), name in "[a-z ]{1,12}[a-z]") {
                let text = format!("# generated\nmax:{max}\n\nstale:{stale}\n");
                let mem = Mem::default().with(&format!("/etc/ts/{name}"), &text);
                let opt = format!("file:{}", escape_path(&name));
                let p = run(&[&opt], &mem).expect("valid");
                prop_assert_eq!((p.max, p.stale), (max, stale));
            }

            #[test]
            fn escape_round_trips(name in "[^\\x00]{1,30}") {
                prop_assert_eq!(unescape_path(&escape_path(&name)).expect("valid"), name);
            }

            #[test]
            fn non_numbers_are_refused_naming_the_value(v in "[^0-9]{1,8}|[0-9]{0,3}[^0-9\\s\"']+[0-9]{0,3}") {
                let opt = format!("max:{v}");
                let e = run(&[&opt], &Mem::default()).expect_err("invalid");
                let v = unquote(v.trim());
                prop_assert!(v.is_empty() || e.contains(&quote(v)), "{}", e);
            }

            /// Whatever the input, an error is printable and short, and a
            /// refused value is named after its parameter.
            #[test]
            fn errors_are_printable_short_and_name_the_parameter_first(
                name in prop_oneof![Just("max"), Just("stale"), Just("statfreq"), Just("id"), Just("file")],
                value in proptest::collection::vec(any::<char>(), 1..400),
                in_file in any::<bool>(),
            ) {
                let value: String = value.into_iter().collect();
                let item = format!("{name}:{value}");
                let mem = Mem::default().with("/etc/ts/f", &format!("{item}\n"));
                let opts = if in_file { ["max:1", "file:f"] } else { ["max:1", item.as_str()] };
                if let Err(e) = run(&opts, &mem) {
                    prop_assert!(!e.chars().any(char::is_control), "{:?}", e);
                    prop_assert!(e.len() < 1000, "{:?}", e);
                    prop_assert!(
                        e.starts_with(&format!("parameter '{name}' has an "))
                            || e.starts_with("expected name:value")
                            || e.starts_with("unknown parameter"),
                        "{:?}", e
                    );
                }
            }

            #[test]
            fn default_ids_are_valid(url in ".{0,300}") {
                prop_assert!(validate_id(&default_id(&url)).is_ok());
            }
        }
    }
}
