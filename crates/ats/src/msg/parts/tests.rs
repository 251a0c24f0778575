use super::*;

/// Joins the lines of one answer as a reader does (docs/rate_limit.md,
/// "Live control", long answers).
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

#[test]
fn long_other_fields_beside_an_empty_array_are_sent_in_chunks() {
    let body = json!({ "ok": true, "keys": [], "note": "n".repeat(3000) });
    let l = lines("r1", "rate_limit show", body.clone(), 2000);
    assert!(l.len() > 1);
    assert!(
        l.iter().all(|x| x.len() <= 2000),
        "{:?}",
        l.iter().map(String::len).max()
    );
    assert_eq!(join(&l), expected(&body));
}

/// A command echo as long as msg.rs lets through (1024 characters),
/// each escaping to several bytes.
fn long_command() -> String {
    "rate_limit show \"\\é\u{1}"
        .repeat(200)
        .chars()
        .take(1024)
        .collect()
}

#[test]
fn a_long_command_leaves_every_line_within_max() {
    let cmd = long_command();
    let keys: Vec<Value> = (0..300).map(|i| json!({ "key": i })).collect();
    let big = "\"é\\".repeat(1000);
    let bodies = [
        json!({ "ok": true, "keys": keys }),
        json!({ "ok": true, "limiters": [{ "from": big }] }),
        json!({ "ok": false, "error": "e".repeat(3000) }),
    ];
    let id = "i".repeat(64);
    for body in bodies {
        let l = lines(&id, &cmd, body.clone(), 1000);
        assert!(l.len() > 1);
        assert!(
            l.iter().all(|x| x.len() <= 1000),
            "{:?}",
            l.iter().map(String::len).max()
        );
        let joined = join(&l);
        let echoed = joined["command"].as_str().unwrap();
        let kept = echoed.strip_suffix('…').unwrap();
        assert!(!kept.is_empty() && cmd.starts_with(kept), "{echoed}");
        let mut want = body.clone();
        want["request"] = json!(id);
        want["command"] = json!(echoed);
        assert_eq!(joined, want);
    }
}

#[test]
fn a_command_that_fits_its_share_is_echoed_whole() {
    let body = json!({ "ok": true, "keys": (0..3000).collect::<Vec<_>>() });
    let l = lines("r1", "rate_limit show", body.clone(), 1000);
    assert!(l.len() > 1);
    assert_eq!(join(&l), expected(&body));
}
