//! Reading a rule's `@pparam`s and `--config` files into [`Options`].

use std::path::Path;

use limits::quote::{quote, shorten_to};

use super::{invalid, known, lookup, resolve, At, Options, MAX_CONFIG_BYTES};
use optspec::files::Files;

impl Options {
    /// Parses a rule's `@pparam`s; `--config` files are read through `files`,
    /// relative to `config_dir`. List files are only named here: they are
    /// read by [`crate::lists::Lists::load`].
    pub fn parse(args: &[&str], config_dir: &Path, files: &dyn Files) -> Result<Options, String> {
        let mut o = Options::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i];
            i += 1;
            let Some(body) = arg.strip_prefix("--") else {
                return Err(format!(
                    "unexpected argument {}: options are --name=value; known options: {}",
                    quote(arg),
                    known()
                ));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let value = match (lookup(name), inline) {
                (None, _) => {
                    return Err(format!(
                        "unknown option {}; known options: {}",
                        quote(arg),
                        known()
                    ))
                }
                (Some(false), v) => v,
                (Some(true), Some(v)) => Some(v),
                (Some(true), None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(*v)
                    }
                    None => return Err(format!("--{name} needs a value (--{name}=VALUE)")),
                },
            };
            if name == "config" {
                o.config_file(value.unwrap_or(""), config_dir, files)?;
            } else {
                o.set(name, value, &At(None), config_dir)?;
            }
        }
        o.check()?;
        Ok(o)
    }

    pub(super) fn config_file(
        &mut self,
        name: &str,
        config_dir: &Path,
        files: &dyn Files,
    ) -> Result<(), String> {
        if name.is_empty() {
            return Err(invalid("config", name, &At(None), "a file name"));
        }
        let path = resolve(config_dir, name);
        let shown = path.display().to_string();
        let file = files.read(&path, MAX_CONFIG_BYTES).map_err(|e| {
            format!(
                "--config cannot read {}: {}",
                shorten_to(&shown, 256),
                crate::unreadable(e)
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
            match lookup(name) {
                None => {
                    return Err(format!(
                        "unknown option {}{}; known options: {}",
                        quote(line),
                        at.suffix(),
                        known()
                    ))
                }
                Some(_) if name == "config" => {
                    return Err(format!(
                        "--config cannot be used inside a config file{}",
                        at.suffix()
                    ))
                }
                Some(true) if value.is_none() => {
                    return Err(format!(
                        "--{name} needs a value (name=VALUE){}",
                        at.suffix()
                    ))
                }
                Some(_) => self.set(name, value, &at, config_dir)?,
            }
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
