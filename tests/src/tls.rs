//! TLS handshakes: runs tests/tls/client.py (`/usr/bin/python3`'s `ssl`)
//! with a plan of connections, each with its SNI, source address and
//! steps, and returns how each handshake went. For the global mode, which
//! acts at the client hello.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// The system Python (its `ssl` module is all the client needs).
const PYTHON: &str = "/usr/bin/python3";

/// One client connection's plan.
#[derive(Clone, Debug)]
pub struct Client {
    sni: Option<String>,
    source: Option<String>,
    steps: Vec<Value>,
}

impl Client {
    /// A connection that sends `sni` (`None`: no SNI).
    pub fn new(sni: Option<&str>) -> Client {
        Client {
            sni: sni.map(str::to_owned),
            source: None,
            steps: Vec::new(),
        }
    }

    /// From this local address (127.0.0.2, …: a distinct client).
    pub fn from(mut self, source: &str) -> Client {
        self.source = Some(source.to_owned());
        self
    }

    /// Connects and completes the handshake (or records its failure).
    pub fn hello(self) -> Client {
        self.step(json!({ "hello": true }))
    }

    /// [`hello`](Self::hello), giving up (and closing) after `ms`.
    pub fn hello_within(self, ms: u64) -> Client {
        self.step(json!({ "hello": true, "timeout_ms": ms }))
    }

    /// One HTTP/1.1 request on the connection (Host: the SNI).
    pub fn get(self, path: &str) -> Client {
        self.step(json!({ "get": path }))
    }

    pub fn sleep_ms(self, ms: u64) -> Client {
        self.step(json!({ "sleep_ms": ms }))
    }

    pub fn signal(self, name: &str) -> Client {
        self.step(json!({ "signal": name }))
    }

    /// Until another connection signals `name`.
    pub fn wait_for(self, name: &str) -> Client {
        self.step(json!({ "await": name }))
    }

    pub fn close(self) -> Client {
        self.step(json!({ "close": true }))
    }

    fn step(mut self, s: Value) -> Client {
        self.steps.push(s);
        self
    }
}

/// How one connection went.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The handshake completed (`Some(false)`: it failed; `None`: none was tried).
    pub ok: Option<bool>,
    pub error: Option<String>,
    /// When it connected and when the handshake ended, in ms from the start.
    pub start_ms: Option<u64>,
    pub done_ms: Option<u64>,
    /// The status of its `get`, if any.
    pub status: Option<u16>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.ok == Some(true)
    }

    /// The handshake failed with a TLS alert from the server (what a
    /// refusal sends), not a timeout or a closed connection.
    pub fn refused(&self) -> bool {
        self.ok == Some(false)
            && self
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("SSLError") && e.contains("ALERT"))
    }

    /// The handshake gave up waiting (the client's own timeout).
    pub fn timed_out(&self) -> bool {
        self.ok == Some(false)
            && self
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("TimeoutError") || e.contains("timed out"))
    }

    /// How long the handshake took.
    pub fn handshake_ms(&self) -> Option<u64> {
        Some(self.done_ms?.saturating_sub(self.start_ms?))
    }
}

/// Runs the clients (each in its own thread, all to 127.0.0.1:`port`) and
/// returns their outcomes in order. Every wait is bounded by `timeout_s`.
pub fn run(port: u16, timeout_s: u64, clients: &[Client]) -> Vec<Outcome> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tls/client.py");
    let plan = json!({
        "port": port,
        "timeout_s": timeout_s,
        "conns": clients.iter().map(|c| json!({
            "sni": c.sni,
            "source": c.source,
            "steps": c.steps,
        })).collect::<Vec<_>>(),
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
    let out = child.wait_with_output().expect("the TLS client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the TLS client failed ({}): {}{}",
        out.status,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the TLS client's output {text:?}: {e}"));
    v["conns"]
        .as_array()
        .expect("conns in the output")
        .iter()
        .map(|c| Outcome {
            ok: c["ok"].as_bool(),
            error: c["error"].as_str().map(str::to_owned),
            start_ms: c["start_ms"].as_u64(),
            done_ms: c["done_ms"].as_u64(),
            status: c["status"].as_u64().and_then(|s| u16::try_from(s).ok()),
        })
        .collect()
}

/// `n` clients from `source`, each a handshake held until `release` is
/// signalled, then closed. Each signals `{release}-held-{i}` once its
/// handshake is done (see [`Client::after_held`]).
pub fn holders(n: usize, sni: Option<&str>, source: &str, release: &str) -> Vec<Client> {
    (0..n)
        .map(|i| {
            Client::new(sni)
                .from(source)
                .hello()
                .signal(&format!("{release}-held-{i}"))
                .wait_for(release)
                .close()
        })
        .collect()
}

impl Client {
    /// Waits until `n` [`holders`] of `release` are through their handshakes.
    pub fn after_held(self, n: usize, release: &str) -> Client {
        (0..n).fold(self, |c, i| c.wait_for(&format!("{release}-held-{i}")))
    }
}

/// `n` clients from `source` that connect one after the other, each
/// closing before the next connects (`tag` keeps their signals apart from
/// other groups').
pub fn one_by_one(n: usize, sni: Option<&str>, source: &str, tag: &str) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let c = Client::new(sni).from(source);
            let c = match i {
                0 => c,
                _ => c.wait_for(&format!("{tag}-{}", i - 1)),
            };
            c.hello().close().signal(&format!("{tag}-{i}"))
        })
        .collect()
}
