//! An answer as lines that fit ATS's text log buffer: ATS drops a longer
//! line whole. Every line is a JSON object with the answer's `request` id,
//! `part` (from 1) and `parts`, its `command` and `ok`:
//! - an answer that fits is one line with the whole answer (`parts` 1);
//! - else, if its largest array field can be cut between elements, each
//!   line has every other field and a run of that array, and `split` names
//!   the array: the answer is part 1 with the arrays of all parts joined;
//! - else each line has a `chunk` of the answer's JSON text: the answer is
//!   the chunks joined, in `part` order, parsed.

use serde_json::{json, Map, Value};

/// The lines of one answer, each at most `max` bytes (as far as the
/// `command` echo leaves room: a line is never less than its head).
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
    split_array(&body, max).unwrap_or_else(|| chunks(&body, max))
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
mod tests {
    use super::*;

    /// Joins the lines of one answer as the README says a reader does.
    fn join(lines: &[String]) -> Value {
        let parsed: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (i, p) in parsed.iter().enumerate() {
            assert_eq!(p["part"], json!(i + 1));
            assert_eq!(p["parts"], json!(parsed.len()));
            assert_eq!(p["request"], parsed[0]["request"]);
        }
        if parsed[0].get("chunk").is_some() {
            let text: String = parsed
                .iter()
                .map(|p| p["chunk"].as_str().unwrap())
                .collect();
            return serde_json::from_str(&text).unwrap();
        }
        let mut out = parsed[0].clone();
        if let Some(name) = parsed[0]["split"].as_str() {
            let all: Vec<Value> = parsed
                .iter()
                .flat_map(|p| p[name].as_array().unwrap().clone())
                .collect();
            out[name] = Value::Array(all);
            out.as_object_mut().unwrap().remove("split");
        }
        let o = out.as_object_mut().unwrap();
        o.remove("part");
        o.remove("parts");
        out
    }

    fn expected(body: &Value) -> Value {
        let mut b = body.clone();
        b["request"] = json!("r1");
        b["command"] = json!("rate_limit show");
        b
    }

    #[test]
    fn a_short_answer_is_one_line() {
        let body = json!({ "ok": true, "keys": [1, 2, 3] });
        let l = lines("r1", "rate_limit show", body.clone(), 8000);
        assert_eq!(l.len(), 1);
        assert_eq!(join(&l), expected(&body));
    }

    #[test]
    fn a_long_array_is_cut_between_elements() {
        let keys: Vec<Value> = (0..1000)
            .map(|i| json!({ "key": format!("ip=10.0.{}.{}", i / 256, i % 256), "active": i }))
            .collect();
        let body = json!({ "ok": true, "id": "group g", "keys": keys });
        let l = lines("r1", "rate_limit show", body.clone(), 8000);
        assert!(l.len() > 4, "{} lines", l.len());
        assert!(l.iter().all(|x| x.len() <= 8000));
        assert!(l[0].contains("\"split\":\"keys\""));
        assert!(l.iter().all(|x| x.contains("\"id\":\"group g\"")));
        assert_eq!(join(&l), expected(&body));
    }

    #[test]
    fn an_element_too_long_for_a_line_is_sent_in_chunks() {
        let big = "\"é\\".repeat(3000);
        let body = json!({ "ok": true, "limiters": [{ "from": big }], "note": "x" });
        let l = lines("r1", "rate_limit show", body.clone(), 2000);
        assert!(l.len() > 5);
        assert!(
            l.iter().all(|x| x.len() <= 2000),
            "{:?}",
            l.iter().map(String::len).max()
        );
        assert!(l.iter().all(|x| x.contains("\"request\":\"r1\"")));
        assert_eq!(join(&l), expected(&body));
    }
}
