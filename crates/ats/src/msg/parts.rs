//! An answer as lines that fit ATS's text log buffer: ATS drops a longer
//! line whole. Every line is a JSON object with the answer's `request` id,
//! `part` (from 1) and `parts`, its `command` and `ok`:
//! - an answer that fits is one line with the whole answer (`parts` 1);
//! - else, if its largest array field can be cut between elements, each
//!   line has every other field and a run of that array, and `split` names
//!   the array: the answer is part 1 with the arrays of all parts joined;
//! - else each line has a `chunk` of the answer's JSON text: the answer is
//!   the chunks joined, in `part` order, parsed.
//!
//! An answer of several lines echoes its `command` in at most a quarter of
//! `max` bytes (JSON-escaped), cut with a trailing `…`, so a long command
//! cannot leave a line no room for its part of the answer.

use serde_json::{json, Map, Value};

/// The lines of one answer, each at most `max` bytes (`max` of 1000 or
/// more, as [`crate::textlog::max_line`] gives; the request id is at most
/// 64 characters).
pub(crate) fn lines(request: &str, command: &str, body: Value, max: usize) -> Vec<String> {
    let mut body = match body {
        Value::Object(m) => m,
        other => Map::from_iter([("answer".to_owned(), other)]),
    };
    body.insert("request".into(), json!(request));
    body.insert("command".into(), json!(command));
    let mut whole = body.clone();
    whole.insert("part".into(), json!(1));
    whole.insert("parts".into(), json!(1));
    let text = Value::Object(whole).to_string();
    if text.len() <= max {
        return vec![text];
    }
    body.insert("command".into(), json!(echo(command, max / 4)));
    split_array(&body, max).unwrap_or_else(|| chunks(&body, max))
}

/// `command`, cut (marked by a trailing `…`) so that it takes at most
/// `budget` bytes as a JSON string, quotes included.
fn echo(command: &str, budget: usize) -> String {
    let json_len = |s: &str| Value::String(s.to_owned()).to_string().len();
    if json_len(command) <= budget {
        return command.to_owned();
    }
    let mut out = String::new();
    let mut len = json_len("…");
    let mut one = [0u8; 4];
    for c in command.chars() {
        let n = json_len(c.encode_utf8(&mut one)) - 2;
        if len + n > budget {
            break;
        }
        len += n;
        out.push(c);
    }
    out.push('…');
    out
}

/// Placeholders as wide as any part number, to size a line's head.
const WIDE: u64 = 9_999_999;

/// The lines of `body` cut along its largest array, or `None` if even one
/// element with the other fields is too long.
fn split_array(body: &Map<String, Value>, max: usize) -> Option<Vec<String>> {
    let (name, items) = body
        .iter()
        .filter_map(|(k, v)| v.as_array().map(|a| (k, a)))
        .max_by_key(|(_, a)| a.iter().map(|e| e.to_string().len()).sum::<usize>())?;
    let mut base = body.clone();
    base.insert(name.clone(), json!([]));
    base.insert("split".into(), json!(name));
    base.insert("part".into(), json!(WIDE));
    base.insert("parts".into(), json!(WIDE));
    let base_len = Value::Object(base.clone()).to_string().len();
    // The other fields alone too long (the loop below never runs for an
    // empty array): chunks instead.
    if base_len > max {
        return None;
    }
    let mut groups: Vec<Vec<Value>> = vec![Vec::new()];
    let mut len = base_len;
    for item in items {
        let n = item.to_string().len() + 1; // and a comma
        if base_len + n > max {
            return None;
        }
        if len + n > max {
            groups.push(Vec::new());
            len = base_len;
        }
        len += n;
        groups.last_mut()?.push(item.clone());
    }
    let parts = groups.len();
    Some(
        groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let mut line = base.clone();
                line.insert(name.clone(), Value::Array(g));
                line.insert("part".into(), json!(i + 1));
                line.insert("parts".into(), json!(parts));
                Value::Object(line).to_string()
            })
            .collect(),
    )
}

/// The lines of `body` as chunks of its JSON text.
fn chunks(body: &Map<String, Value>, max: usize) -> Vec<String> {
    let text = Value::Object(body.clone()).to_string();
    let mut head = Map::new();
    for k in ["request", "command", "ok"] {
        if let Some(v) = body.get(k) {
            head.insert(k.into(), v.clone());
        }
    }
    head.insert("part".into(), json!(WIDE));
    head.insert("parts".into(), json!(WIDE));
    head.insert("chunk".into(), json!(""));
    let head_len = Value::Object(head.clone()).to_string().len();
    // JSON text escapes to at most twice its length in a string (`"`, `\`).
    let room = (max.saturating_sub(head_len) / 2).max(64);
    let mut pieces = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut end = room.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece);
        rest = tail;
    }
    let parts = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut line = head.clone();
            line.insert("part".into(), json!(i + 1));
            line.insert("parts".into(), json!(parts));
            line.insert("chunk".into(), json!(p));
            Value::Object(line).to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests;
