//! Reading a rule's `@pparam`s and `--config` files into [`Options`],
//! through the options' table (`args.rs`).

use std::path::Path;

use limits::quote::{quote, shorten_to};
use optspec::files::Files;
use optspec::{find, known, Names, Repeats, Takes, Tokens};

use super::args::{CONFIG, OPTIONS};
use super::{resolve, At, Draft, Options, MAX_CONFIG_BYTES};

/// The tables the options are found in: the one.
pub(crate) fn tables() -> [&'static dyn Names; 1] {
    [&OPTIONS]
}

impl Options {
    /// Parses a rule's `@pparam`s; `--config` files are read through `files`,
    /// relative to `config_dir`. List files are only named here: they are
    /// read by [`crate::lists::Lists::load`].
    pub fn parse(args: &[&str], config_dir: &Path, files: &dyn Files) -> Result<Options, String> {
        let tables = tables();
        let mut d = Draft {
            o: Options::default(),
            include: None,
        };
        // A later value overrides an earlier one (`@pparam`s after `--config`).
        for given in Tokens::new(args, &tables, Repeats::Override) {
            let given = given.map_err(|e| e.message(&tables))?;
            OPTIONS[given.index].apply(&mut d, given.value, &At(None))?;
            if let Some(name) = d.include.take() {
                d.config_file(&name, config_dir, files)?;
            }
        }
        let mut o = d.o;
        // The list files, as `resolve` does: relative to the config dir.
        for f in [&mut o.allow_file, &mut o.deny_file].into_iter().flatten() {
            if !f.is_absolute() {
                *f = config_dir.join(&*f);
            }
        }
        o.check()?;
        Ok(o)
    }
}

impl Draft {
    /// Applies the lines of a `--config` file: `name = value` or `name`
    /// (a leading `--` allowed), `#` comments.
    fn config_file(
        &mut self,
        name: &str,
        config_dir: &Path,
        files: &dyn Files,
    ) -> Result<(), String> {
        let tables = tables();
        let path = resolve(config_dir, name);
        let shown = path.display().to_string();
        let file = files.read(&path, MAX_CONFIG_BYTES).map_err(|e| {
            format!(
                "--config cannot read {}: {}",
                shorten_to(&shown, 256),
                crate::files::unreadable(e)
            )
        })?;
        for (n, line) in file.text.lines().enumerate() {
            let at = At(Some((shown.clone(), n + 1)));
            let line = strip_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let body = line.strip_prefix("--").unwrap_or(line);
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (body, None),
            };
            let Some((_, index, takes)) = find(&tables, name) else {
                return Err(format!(
                    "unknown option {}{}; known options: {}",
                    quote(line),
                    at.suffix(),
                    known(&tables)
                ));
            };
            if name == CONFIG {
                return Err(format!(
                    "--config cannot be used inside a config file{}",
                    at.suffix()
                ));
            }
            if takes == Takes::Value && value.is_none() {
                return Err(format!(
                    "--{name} needs a value (name=VALUE){}",
                    at.suffix()
                ));
            }
            OPTIONS[index].apply(self, value, &at)?;
        }
        Ok(())
    }
}

/// A config line without its comment: `#` starts one at the start of the
/// line or after whitespace, so a regex value may hold `#` (`path-regex =
/// ^/a#b`), while `threshold = 3 # seconds` still ends at `3`.
pub(crate) fn strip_comment(line: &str) -> &str {
    let b = line.as_bytes();
    let at = (0..b.len()).find(|&i| b[i] == b'#' && (i == 0 || b[i - 1].is_ascii_whitespace()));
    at.map_or(line, |i| &line[..i])
}
