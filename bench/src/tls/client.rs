//! The bench's TLS client: bench/tls/client.py (`/usr/bin/python3`'s
//! `ssl`), one long-lived process per traffic_server, driven one JSON
//! command per line. Long-lived so that Python's start-up (tens of ms, a
//! few thousand of traffic_server's timer instructions under callgrind) is
//! never inside a measured window.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::{json, Value};

pub const PYTHON: &str = "/usr/bin/python3";

/// What a run of handshakes did.
#[derive(Clone, Debug, Default)]
pub struct Hellos {
    pub ok: u64,
    pub failed: u64,
    /// Each distinct failure as the client saw it, with its count.
    pub errors: Vec<(String, u64)>,
    /// Handshake times of the successful ones, connect to done, in µs.
    pub us: Vec<f64>,
}

impl Hellos {
    /// The failures in one line, for errors and the report.
    pub fn error_summary(&self) -> String {
        let v: Vec<String> = self
            .errors
            .iter()
            .map(|(e, n)| format!("{n}× {e}"))
            .collect();
        v.join("; ")
    }
}

/// One handshake plan: `n` from `source` with `sni`, `interval_ms` apart.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'a> {
    pub port: u16,
    pub sni: &'a str,
    pub source: &'a str,
    pub n: u64,
    pub interval_ms: u64,
    /// Bound of each socket operation (callgrind slows a handshake to
    /// ~100 ms; a refused one must fail, not hang).
    pub timeout_s: u64,
}

pub struct Py {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Py {
    pub fn spawn() -> Result<Py, String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tls/client.py");
        let mut child = Command::new(PYTHON)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {PYTHON} {}: {e}", script.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin for the TLS client")?;
        let stdout = child.stdout.take().ok_or("no stdout for the TLS client")?;
        let (tx, lines) = mpsc::channel();
        // A reader thread, so that every answer is awaited with a deadline.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Py {
            child,
            stdin,
            lines,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn call(&mut self, cmd: Value, timeout: Duration) -> Result<Value, String> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("writing to the TLS client: {e}"))?;
        let line = match self.lines.recv_timeout(timeout) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "the TLS client did not answer {cmd} within {timeout:?}"
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!("the TLS client exited during {cmd}"))
            }
        };
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| format!("the TLS client's answer {line:?}: {e}"))?;
        match v.get("error").and_then(Value::as_str) {
            Some(e) if v.get("ok").is_none() => Err(format!("the TLS client: {e}")),
            _ => Ok(v),
        }
    }

    /// `plan.n` handshakes one after the other, each closed at once.
    pub fn hellos(&mut self, plan: Plan) -> Result<Hellos, String> {
        let bound =
            Duration::from_secs(plan.n * (plan.timeout_s + plan.interval_ms / 1000 + 1) + 5);
        let v = self.call(
            json!({"cmd": "hello", "port": plan.port, "sni": plan.sni, "source": plan.source,
                   "n": plan.n, "interval_ms": plan.interval_ms, "timeout_s": plan.timeout_s}),
            bound,
        )?;
        let num = |k: &str| v[k].as_u64().ok_or_else(|| format!("no '{k}' in {v}"));
        let mut errors: Vec<(String, u64)> = v["errors"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        errors.sort_by_key(|e| std::cmp::Reverse(e.1));
        Ok(Hellos {
            ok: num("ok")?,
            failed: num("failed")?,
            errors,
            us: v["us"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default(),
        })
    }

    /// One handshake kept open until [`release`](Self::release).
    pub fn hold(&mut self, port: u16, sni: &str, source: &str) -> Result<(), String> {
        let v = self.call(
            json!({"cmd": "hold", "port": port, "sni": sni, "source": source, "timeout_s": 60}),
            Duration::from_secs(70),
        )?;
        match v["ok"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(format!("the held connection's handshake failed: {v}")),
        }
    }

    pub fn release(&mut self) -> Result<(), String> {
        self.call(json!({"cmd": "release"}), Duration::from_secs(10))
            .map(|_| ())
    }

    /// A TLS 1.3 client's first flight (the ClientHello record) for `sni`.
    pub fn client_hello(&mut self, sni: &str) -> Result<Vec<u8>, String> {
        let v = self.call(
            json!({"cmd": "clienthello", "sni": sni}),
            Duration::from_secs(10),
        )?;
        let hex = v["hex"].as_str().ok_or_else(|| format!("no hex in {v}"))?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| format!("bad hex from the TLS client: {hex:.40}"))?;
        // A handshake record (22) of TLS 1.x carrying a ClientHello (1).
        if bytes.len() < 6 || bytes[0] != 22 || bytes[1] != 3 || bytes[5] != 1 {
            return Err(format!("not a ClientHello record: {hex:.40}"));
        }
        Ok(bytes)
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        // Our own child, by its handle (it holds connections open otherwise).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
