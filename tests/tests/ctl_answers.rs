//! `traffic_ctl plugin msg rate_limit …` answers longer than ATS's text log
//! buffer, the helper script `tools/ats-plugin-msg`, and commands refused
//! on `--store` rules; real traffic_server under traffic_manager.

use std::path::Path;
use std::process::Command;

use ats_tests::client::Conn;
use ats_tests::redis::Redis;
use ats_tests::{Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The parts of `answer` (joined, with its `request` id) in the answer
/// log, and the longest of its lines.
fn parts_and_longest(ts: &TrafficServer, answer: &serde_json::Value) -> (u64, usize) {
    let id = answer["request"].as_str().expect("request id");
    let log = ts.log("rate_limit_ctl.log");
    let mine: Vec<(serde_json::Value, usize)> = log
        .lines()
        .filter_map(|l| Some((serde_json::from_str::<serde_json::Value>(l).ok()?, l.len())))
        .filter(|(v, _)| v["request"].as_str() == Some(id))
        .collect();
    let parts = mine
        .first()
        .and_then(|(v, _)| v["parts"].as_u64())
        .unwrap_or(0);
    assert_eq!(mine.len() as u64, parts, "request {id}: every part once");
    (parts, mine.iter().map(|(_, n)| *n).max().unwrap_or(0))
}

/// Runs the helper script against `ts`, finding the log directory itself.
fn script(ts: &TrafficServer, args: &[&str]) -> (bool, String, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/ats-plugin-msg");
    let out = Command::new("bash")
        .arg(path)
        .args(args)
        .env("TS_RUNROOT", ts.root().join("runroot.yaml"))
        // This version's tools (ATS_PREFIX), not whichever PATH finds.
        .env("TRAFFIC_CTL", ats_tests::ats::bin("traffic_ctl"))
        .env("TRAFFIC_LAYOUT", ats_tests::ats::bin("traffic_layout"))
        .env_remove("ATS_LOGDIR")
        .output()
        .expect("run tools/ats-plugin-msg");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_helper_script_refuses_a_wait_that_is_not_whole_seconds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/ats-plugin-msg");
    for bad in ["abc", "0", "1.5", "-1", "3601"] {
        let out = Command::new("bash")
            .arg(&path)
            .args(["rate_limit", "show"])
            .env("ATS_MSG_WAIT", bad)
            .env("ATS_LOGDIR", "/nonexistent")
            .output()
            .expect("run tools/ats-plugin-msg");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&format!("ATS_MSG_WAIT='{bad}' is invalid")) && err.contains("1 to 3600"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn long_answers_are_split_into_lines_and_read_whole() {
    let origin = Origin::start();
    let mut remap: String = (0..40)
        .map(|i| {
            rule(
                &format!("r{i}.test"),
                &origin,
                &format!("--limit={} --tag=many{i}", i + 1),
            )
        })
        .collect();
    // One request per key puts each key 100 s over its rate.
    remap += &rule(
        "k.test",
        &origin,
        "--key=header:X-User --rate=0.01 --burst=1 --queue=0 --tag=users",
    );
    let mut ts = start(remap);
    let mut c = Conn::open(ts.port()).expect("connect");
    for i in 0..1000 {
        let r = c
            .get("k.test", "/", &[("X-User", &format!("user{i}"))])
            .expect("get");
        assert_eq!(r.status, 200, "user{i}");
    }

    let shown = json(&ts.plugin_msg("rate_limit", "show"));
    assert_eq!(shown["ok"], true, "{shown}");
    let limiters = shown["limiters"].as_array().expect("limiters");
    assert_eq!(limiters.len(), 41, "every limiter is in the answer");
    for i in 0..40 {
        assert!(
            limiters
                .iter()
                .any(|l| l["limit"] == i + 1
                    && l["rules"][0]["from"] == format!("http://r{i}.test/")),
            "r{i}.test"
        );
    }
    let (parts, longest) = parts_and_longest(&ts, &shown);
    assert!(parts > 1, "show of 41 limiters takes several lines");
    assert!(longest <= 8000, "longest line {longest} bytes");

    let top = json(&ts.plugin_msg("rate_limit", "top users 1000"));
    assert_eq!(top["ok"], true, "{top}");
    let keys = top["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1000, "every key over its rate is listed");
    assert!(keys
        .iter()
        .all(|k| k["over_rate_ms"].as_u64() > Some(90_000)));
    let (parts, longest) = parts_and_longest(&ts, &top);
    assert!(parts >= 5, "top 1000 takes several lines ({parts})");
    assert!(longest <= 8000, "longest line {longest} bytes");
    assert!(!ts.diags().contains("was not written"), "no line dropped");

    // The helper script: finds the log directory through traffic_layout
    // (traffic_ctl config get says NULL), matches its own request id and
    // joins the parts.
    let (ok, out, err) = script(&ts, &["rate_limit", "top users 1000"]);
    assert!(ok, "{out} {err}");
    let v = json(&out);
    assert_eq!(v["keys"].as_array().map(Vec::len), Some(1000), "{err}");
    let long_command = format!("show {}", "r7.test".repeat(12));
    let (ok, out, _) = script(&ts, &["rate_limit", &long_command]);
    assert!(!ok, "an unknown target is an error: {out}");
    let v = json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["command"],
        format!("rate_limit {long_command}"),
        "echoed whole"
    );
    assert!(v["error"]
        .as_str()
        .unwrap_or("")
        .contains("no group or rule named"));
    let (ok, out, _) = script(&ts, &["rate_limit.show", "many3"]);
    assert!(ok, "{out}");
    assert_eq!(json(&out)["limiters"][0]["limit"], 4);
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );
}

#[test]
fn set_on_a_store_rule_is_refused_and_changes_nothing() {
    let redis = Redis::start().expect("redis");
    let origin = Origin::start();
    let mut ts = start(rule(
        "s.test",
        &origin,
        &format!(
            "--limit=3 --group=st --tag=st --store={} --store-failure=closed",
            redis.url()
        ),
    ));
    let answer = json(&ts.plugin_msg("rate_limit", "set st limit=9"));
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or("");
    assert!(
        error.contains("group st is decided in Redis (--store)")
            && error.contains("nothing changed"),
        "{error}"
    );
    let shown = json(&ts.plugin_msg("rate_limit", "show st"));
    assert_eq!(shown["limiters"][0]["limit"], 3, "{shown}");
    assert!(ts.is_running());
}
