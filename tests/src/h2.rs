//! HTTP/2 over TLS: runs tests/h2/client.py (`/usr/bin/python3` with the
//! `h2` module, Debian's python3-h2) with a plan of connections and steps,
//! and returns what each stream got. Steps are JSON objects (see the
//! script's docstring), built with the helpers below.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// The system Python: python3-h2 is installed for it (a pyenv `python3`
/// on PATH may lack it).
const PYTHON: &str = "/usr/bin/python3";

/// What one stream got.
#[derive(Debug, Clone)]
pub struct Stream {
    pub path: String,
    /// The response status; None if no response headers came.
    pub status: Option<u16>,
    /// When the response headers came, in ms from the start of the run.
    pub t_ms: Option<u64>,
    /// The response ended, or the stream was reset.
    pub ended: bool,
    pub reset_by_server: bool,
    pub reset_by_client: bool,
}

/// One connection's streams, in send order, and its error (a step that
/// timed out, a TLS or protocol failure).
#[derive(Debug, Clone)]
pub struct Conn {
    pub streams: Vec<Stream>,
    pub error: Option<String>,
}

impl Conn {
    /// The statuses of its streams, in send order (0: none came).
    pub fn statuses(&self) -> Vec<u16> {
        self.streams.iter().map(|s| s.status.unwrap_or(0)).collect()
    }
}

/// Opens `n` streams: GET `{path}{i}` (`i` counts the connection's streams).
pub fn send(n: usize, path: &str) -> Value {
    json!({"send": n, "path": path})
}

/// `send` with request headers.
pub fn send_with(n: usize, path: &str, headers: &[(&str, &str)]) -> Value {
    let h: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    json!({"send": n, "path": path, "headers": h})
}

/// Until `k` of the connection's streams have ended.
pub fn wait(k: usize) -> Value {
    json!({ "wait": k })
}

/// Until `k` of its streams have their response headers.
pub fn wait_status(k: usize) -> Value {
    json!({ "wait_status": k })
}

pub fn sleep_ms(ms: u64) -> Value {
    json!({ "sleep_ms": ms })
}

/// RST_STREAM (CANCEL) on these streams (indexes in send order).
pub fn reset(streams: &[usize]) -> Value {
    json!({ "reset": streams })
}

/// Closes the connection (TCP close, no GOAWAY).
pub fn close() -> Value {
    json!({"close": true})
}

pub fn signal(name: &str) -> Value {
    json!({ "signal": name })
}

/// Until another connection signals `name`.
pub fn await_signal(name: &str) -> Value {
    json!({ "await": name })
}

/// Runs the connections (each in its own thread, all to `port` over TLS
/// with `:authority` `host`) and returns them in order. Every wait in the
/// script is bounded by `timeout_s`. Panics if the script cannot run.
pub fn run(port: u16, host: &str, timeout_s: u64, conns: Vec<Vec<Value>>) -> Vec<Conn> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("h2/client.py");
    let plan = json!({
        "port": port,
        "host": host,
        "timeout_s": timeout_s,
        "conns": conns.into_iter().map(|steps| json!({"steps": steps})).collect::<Vec<_>>(),
    });
    let mut child = Command::new(PYTHON)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON} {}: {e}", script.display()));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(plan.to_string().as_bytes())
            .expect("writing the plan");
    }
    let out = child.wait_with_output().expect("the h2 client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the h2 client failed ({}; is python3-h2 installed?): {}{}",
        out.status,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the h2 client's output {text:?}: {e}"));
    v["conns"]
        .as_array()
        .expect("conns in the output")
        .iter()
        .map(|c| Conn {
            error: c["error"].as_str().map(str::to_owned),
            streams: c["streams"]
                .as_array()
                .map(|a| a.iter().map(stream).collect())
                .unwrap_or_default(),
        })
        .collect()
}

fn stream(s: &Value) -> Stream {
    Stream {
        path: s["path"].as_str().unwrap_or_default().to_owned(),
        status: s["status"].as_u64().and_then(|v| u16::try_from(v).ok()),
        t_ms: s["t_ms"].as_u64(),
        ended: s["ended"].as_bool().unwrap_or(false),
        reset_by_server: s["reset_by_server"].as_bool().unwrap_or(false),
        reset_by_client: s["reset_by_client"].as_bool().unwrap_or(false),
    }
}

/// A remap.config line mapping `https://{host}/` (requests on the TLS
/// port) to `origin` through `plugin_name`, options as `@pparam`s.
pub fn rule(plugin_name: &str, host: &str, origin: &crate::Origin, params: &str) -> String {
    crate::rule(plugin_name, host, origin, params).replacen("map http://", "map https://", 1)
}
