//! A throwaway Traffic Server: own runroot, own loopback ports, own logs.
//!
//! Runs the Traffic Server that [`crate::ats`] selects (`ATS_PREFIX`): 9.2
//! from a `records.config`, optionally under traffic_manager; 10.x from a
//! `records.yaml`, always as a plain traffic_server that `traffic_ctl`
//! reaches over JSON-RPC (`RUNTIMEDIR/jsonrpc20.sock`).
//!
//! Here: the instance and its files. Setting it up is `builder.rs`, the
//! config files it starts from `config.rs`, starting and stopping it
//! `process.rs`, `traffic_ctl` (metrics, plugin messages, reloads) `ctl.rs`.

mod builder;
mod config;
mod ctl;
mod process;

pub use process::{process_alive, runroot_processes};

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use crate::client::{self, Response};
use crate::wait_until;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Configuration of an instance; see [`TrafficServer::builder`].
pub struct TsBuilder {
    remap: String,
    records: BTreeMap<String, String>,
    plugin_config: String,
    files: Vec<(String, String)>,
    manager: bool,
    debug_tags: String,
    root: Option<PathBuf>,
    port: Option<u16>,
    wrapper: Vec<String>,
    start_timeout: Duration,
    ipv6: bool,
    proxy_protocol: bool,
    tls: bool,
}

/// Startup failed: ATS exited or never became ready. Carries diags.log.
pub struct StartError {
    pub reason: String,
    pub diags: String,
}

impl fmt::Debug for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n--- diags.log ---\n{}", self.reason, self.diags)
    }
}

/// Where an instance lives: a temp dir (tests) or a fixed one (the demo).
enum Root {
    Temp(tempfile::TempDir),
    Fixed(PathBuf),
}

impl Root {
    fn path(&self) -> &Path {
        match self {
            Root::Temp(t) => t.path(),
            Root::Fixed(p) => p,
        }
    }
}

/// A running instance. Killed (and its logs printed if the test is failing) on drop.
pub struct TrafficServer {
    dir: Root,
    port: u16,
    /// The TLS port ([`TsBuilder::tls`]).
    tls_port: Option<u16>,
    child: Option<Child>,
    /// `traffic_ctl` may be used ([`TsBuilder::with_manager`]).
    ctl: bool,
    /// Running under traffic_manager (9.x with `with_manager`): the child is
    /// the manager, traffic_server its child.
    managed: bool,
    /// traffic_server's pid when the start completed (under the manager).
    first_server_pid: Option<u32>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

impl TrafficServer {
    pub fn builder() -> TsBuilder {
        TsBuilder {
            remap: String::new(),
            records: BTreeMap::new(),
            plugin_config: String::new(),
            files: Vec::new(),
            manager: false,
            debug_tags: "throttle|rate_limit|ip_throttle|probe".into(),
            root: None,
            port: None,
            wrapper: Vec::new(),
            start_timeout: START_TIMEOUT,
            ipv6: false,
            proxy_protocol: false,
            tls: false,
        }
    }

    /// The proxy port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port on 127.0.0.1 (HTTP/2 by ALPN); panics unless the
    /// instance was built with [`TsBuilder::tls`].
    pub fn tls_port(&self) -> u16 {
        self.tls_port
            .expect("tls_port needs the instance built with tls()")
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("etc")
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join("log").join(name)
    }

    fn runtime_path(&self, name: &str) -> PathBuf {
        self.dir.path().join("run").join(name)
    }

    /// Contents of a file in the log directory ("" if absent).
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    pub fn diags(&self) -> String {
        self.log("diags.log")
    }

    /// Waits until `pred` holds for the contents of log `name`.
    pub fn wait_for_log(&self, name: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        wait_until(timeout, || pred(&self.log(name)))
    }

    /// GET `path` with `Host: host` through the proxy.
    pub fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
        client::get(self.port, host, path, headers)
    }

    /// Every log in the log directory plus stdout/stderr, for failure reports.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<PathBuf> = fs::read_dir(self.dir.path().join("log"))
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        names.push(self.dir.path().join("stdout.txt"));
        names.push(self.dir.path().join("stderr.txt"));
        names.sort();
        for p in names {
            let text = fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(200)..];
            out.push_str(&format!(
                "--- {} (last {} lines) ---\n{}\n",
                p.display(),
                tail.len(),
                tail.join("\n")
            ));
        }
        out
    }
}
