//! Names in the parameters: a rule's `id` (checked, or derived from its
//! from-URL) and `file` paths (their escapes, resolved against the
//! configuration directory).

use limits::quote::quote;

use super::MAX_ID_LEN;

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
