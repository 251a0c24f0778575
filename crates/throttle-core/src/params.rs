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

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

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

/// The parameters every name below is documented with, for error messages.
pub const ALLOWED: &str = "max, stale, statfreq, id, file";

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

/// Reads configuration files; injected so tests need no file system.
pub trait Source {
    /// Reads `path` (already resolved), refusing files over `limit` bytes.
    /// Returns the file's identity for loop detection (its canonical path)
    /// and its text.
    fn read(&self, path: &Path, limit: u64) -> Result<(PathBuf, String), String>;
}

/// The real file system.
pub struct FsSource;

impl Source for FsSource {
    fn read(&self, path: &Path, limit: u64) -> Result<(PathBuf, String), String> {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let meta = file.metadata().map_err(|e| e.to_string())?;
        if meta.is_dir() {
            return Err("it is a directory".into());
        }
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        if bytes.len() as u64 > limit {
            return Err(format!("it is larger than {limit} bytes"));
        }
        let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())?;
        let identity = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok((identity, text))
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
            Location::Pparam(raw) => write!(f, "@pparam={raw}"),
            Location::File { path, line, parent } => {
                write!(f, "{}:{line}", path.display())?;
                if let Location::File { .. } = **parent {
                    write!(f, " (included from {parent})")
                } else {
                    write!(f, " (from {parent})")
                }
            }
        }
    }
}

/// Parses a rule's `@pparam` values. `config_dir` resolves relative `file:`
/// paths (ATS's configuration directory).
pub fn parse(options: &[&str], config_dir: &Path, source: &dyn Source) -> Result<Params, String> {
    let mut p = Parser {
        config_dir,
        source,
        stack: Vec::new(),
        files_read: 0,
        max: None,
        stale: 0,
        statfreq_ms: 0,
        id: None,
    };
    for raw in options {
        p.item(raw, &Location::Pparam((*raw).to_owned()))?;
    }
    let max = p.max.ok_or_else(|| {
        "missing required parameter 'max' (the most uncached requests in flight at once, \
         e.g. @pparam=max:100)"
            .to_owned()
    })?;
    Ok(Params {
        max,
        stale: p.stale,
        statfreq_ms: p.statfreq_ms,
        id: p.id,
    })
}

struct Parser<'a> {
    config_dir: &'a Path,
    source: &'a dyn Source,
    /// Identities of the files being read, outermost first.
    stack: Vec<PathBuf>,
    files_read: usize,
    max: Option<u32>,
    stale: u32,
    statfreq_ms: u32,
    id: Option<String>,
}

impl Parser<'_> {
    fn item(&mut self, text: &str, at: &Location) -> Result<(), String> {
        let text = unquote(text.trim());
        let Some(sep) = text.find([':', '=']) else {
            return Err(format!(
                "expected name:value at {at}, got '{text}' (parameters: {ALLOWED})"
            ));
        };
        let name = text[..sep].trim();
        let value = unquote(text[sep + 1..].trim());
        if value.is_empty() && matches!(name, "max" | "stale" | "statfreq" | "id" | "file") {
            return Err(format!("parameter '{name}' at {at} has an empty value"));
        }
        match name {
            "max" => self.max = Some(number(name, value, at, "a whole number")?),
            "stale" => self.stale = number(name, value, at, "a number of seconds")?,
            "statfreq" => {
                let ms = number(name, value, at, "a number of milliseconds")?;
                if ms != 0 && ms < MIN_STATFREQ_MS {
                    return Err(format!(
                        "invalid value '{value}' for 'statfreq' at {at}: expected 0 (no \
                         statistics lines) or at least {MIN_STATFREQ_MS} milliseconds"
                    ));
                }
                self.statfreq_ms = ms;
            }
            "id" => {
                validate_id(value)
                    .map_err(|why| format!("invalid value '{value}' for 'id' at {at}: {why}"))?;
                self.id = Some(value.to_owned());
            }
            "file" => self.file(value, at)?,
            _ => {
                return Err(format!(
                    "unknown parameter '{name}' at {at} (allowed: {ALLOWED})"
                ))
            }
        }
        Ok(())
    }

    fn file(&mut self, value: &str, at: &Location) -> Result<(), String> {
        let bad = |why: String| format!("invalid value '{value}' for 'file' at {at}: {why}");
        let name = unescape_path(value).map_err(bad)?;
        if self.stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(bad(format!(
                "files are included more than {MAX_INCLUDE_DEPTH} levels deep"
            )));
        }
        if self.files_read >= MAX_FILES {
            return Err(bad(format!("more than {MAX_FILES} files are included")));
        }
        let path = resolve(self.config_dir, &name);
        let (identity, text) = self
            .source
            .read(&path, MAX_FILE_BYTES)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        if let Some(first) = self.stack.iter().position(|p| *p == identity) {
            let chain: Vec<String> = self.stack[first..]
                .iter()
                .chain(std::iter::once(&identity))
                .map(|p| p.display().to_string())
                .collect();
            return Err(bad(format!(
                "the file includes itself ({})",
                chain.join(" -> ")
            )));
        }
        self.files_read += 1;
        self.stack.push(identity);
        for (i, line) in text.lines().enumerate() {
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
    Err(format!(
        "invalid value '{value}' for '{name}' at {at}: {why}; expected {what} from 0 to {}",
        u32::MAX
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
                    "unsupported escape '\\{other}' (only '\\ ' for a space and '\\\\' for a \
                     backslash)"
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
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Files in memory, keyed by full path.
    #[derive(Default)]
    struct Mem(HashMap<PathBuf, String>);

    impl Mem {
        fn with(mut self, path: &str, text: &str) -> Self {
            self.0.insert(PathBuf::from(path), text.to_owned());
            self
        }
    }

    impl Source for Mem {
        fn read(&self, path: &Path, limit: u64) -> Result<(PathBuf, String), String> {
            let text = self
                .0
                .get(path)
                .ok_or_else(|| "No such file or directory (os error 2)".to_owned())?;
            if text.len() as u64 > limit {
                return Err(format!("it is larger than {limit} bytes"));
            }
            Ok((path.to_path_buf(), text.clone()))
        }
    }

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
                "invalid value 'abc' for 'max' at @pparam=max:abc: not a whole number",
            ),
            (
                "max:-1",
                "invalid value '-1' for 'max' at @pparam=max:-1: negative values",
            ),
            ("stale:1.5", "invalid value '1.5' for 'stale'"),
            ("stale:0x10", "invalid value '0x10' for 'stale'"),
            (
                "statfreq:99999999999",
                "invalid value '99999999999' for 'statfreq'",
            ),
            ("max:+3", "invalid value '+3' for 'max'"),
            (
                "statfreq:50",
                "expected 0 (no statistics lines) or at least 100",
            ),
            ("max:", "parameter 'max' at @pparam=max: has an empty value"),
            ("max", "expected name:value at @pparam=max, got 'max'"),
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
            e.contains("invalid value 'a b' for 'id'") && e.contains("spaces"),
            "{e}"
        );
        let long = format!("id:{}", "x".repeat(MAX_ID_LEN + 1));
        assert!(err(&["max:1", &long], &Mem::default()).contains("longer than"));
    }

    #[test]
    fn unknown_parameter_lists_allowed() {
        let e = err(&["max:1", "maximum:3"], &Mem::default());
        assert_eq!(
            e,
            "unknown parameter 'maximum' at @pparam=maximum:3 (allowed: max, stale, statfreq, id, file)"
        );
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
            "invalid value 'soon' for 'stale' at /etc/ts/a.config:3 (included from \
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
            e.starts_with("invalid value 'nope.config' for 'file' at @pparam=file:nope.config: cannot read /etc/ts/nope.config: No such file"),
            "{e}"
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
        let p = parse(&[r"file:with\ space.config"], &dir, &FsSource).expect("ok");
        assert_eq!(p.max, 4);
        let e = FsSource.read(&dir.join("big"), 1000).expect_err("too big");
        assert!(e.contains("larger than 1000"), "{e}");
        assert!(FsSource
            .read(&dir, 1000)
            .expect_err("dir")
            .contains("directory"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn default_ids() {
        assert_eq!(default_id("http://t.test/"), "t.test");
        assert_eq!(default_id("https://a.com:8080/x/y/"), "a.com_8080_x_y");
        assert_eq!(default_id("http:///"), "throttle");
        assert!(validate_id(&default_id("http://a b\tc/")).is_ok());
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
                id in "[A-Za-z0-9._/-]{1,30}",
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
                prop_assert!(v.is_empty() || e.contains(&format!("'{v}'")), "{}", e);
            }

            #[test]
            fn default_ids_are_valid(url in ".{0,300}") {
                prop_assert!(validate_id(&default_id(&url)).is_ok());
            }
        }
    }
}
