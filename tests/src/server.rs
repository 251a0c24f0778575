//! A throwaway Traffic Server: own runroot, own loopback ports, own logs.
//!
//! Runs the Traffic Server that [`crate::ats`] selects (`ATS_PREFIX`): 9.2
//! from a `records.config`, optionally under traffic_manager; 10.x from a
//! `records.yaml`, always as a plain traffic_server that `traffic_ctl`
//! reaches over JSON-RPC (`RUNTIMEDIR/jsonrpc20.sock`).

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::ats;
use crate::client::{self, Response};
use crate::wait_until;

const READY: &str = "Traffic Server is fully initialized";
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

/// Why a start is retried: the manager's child keeps dying unheard.
const SILENT_RELAUNCHES: &str =
    "traffic_manager relaunched traffic_server 3 times without a line in diags.log";

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

impl TsBuilder {
    /// remap.config contents. Use `{origin}` style formatting in the caller.
    pub fn remap(mut self, remap: impl Into<String>) -> Self {
        self.remap = remap.into();
        self
    }

    /// Overrides a records.config setting: `record("proxy.config.x", "INT 1")`
    /// (`INT`, `FLOAT` or `STRING`, 9.2 names). On 10.x it goes to
    /// records.yaml under its 10.x name; one that 10.x dropped (such as
    /// `proxy.config.process_manager.mgmt_port`) is left out.
    pub fn record(mut self, name: &str, typed_value: &str) -> Self {
        self.records.insert(name.to_owned(), typed_value.to_owned());
        self
    }

    /// plugin.config contents (global plugins).
    pub fn plugin_config(mut self, text: impl Into<String>) -> Self {
        self.plugin_config = text.into();
        self
    }

    /// An extra file in the config directory (e.g. a plugin's config file).
    pub fn config_file(mut self, name: &str, contents: &str) -> Self {
        self.files.push((name.to_owned(), contents.to_owned()));
        self
    }

    /// Make `traffic_ctl` work: in 9.x start under `traffic_manager`; in
    /// 10.x (no traffic_manager) start traffic_server as usual and wait for
    /// its JSON-RPC socket as well.
    pub fn with_manager(mut self) -> Self {
        self.manager = true;
        self
    }

    /// Run in this directory (emptied first) instead of a temp dir.
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root = Some(dir.into());
        self
    }

    /// Also listen on [::1], the same port (reach it with
    /// [`Conn::open_ipv6`](crate::client::Conn::open_ipv6)).
    pub fn ipv6(mut self) -> Self {
        self.ipv6 = true;
        self
    }

    /// The port expects a PROXY protocol header before each connection's
    /// first request (`:pp`; send it with
    /// [`Conn::open_proxied`](crate::client::Conn::open_proxied)).
    pub fn proxy_protocol(mut self) -> Self {
        self.proxy_protocol = true;
        self
    }

    /// Also listen for TLS (HTTP/1.1 and HTTP/2 by ALPN) on another
    /// loopback port ([`TrafficServer::tls_port`]), with a self-signed
    /// certificate the `openssl` CLI makes for the test. Map `https://HOST/`
    /// in remap.config for requests that arrive there.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Listen on this port instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Starts traffic_server (or, with the manager, traffic_manager) through
    /// this command, e.g. `valgrind --tool=callgrind`. The wrapper must run
    /// it in its own process (as `nice` and valgrind do), so that the
    /// child's pid stays traffic_server's.
    pub fn wrapper(mut self, argv: &[&str]) -> Self {
        self.wrapper = argv.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// How long to wait for "fully initialized" (default 30 s; longer
    /// under a wrapper such as valgrind).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Debug tags to enable (default: our plugins' tags).
    pub fn debug_tags(mut self, tags: &str) -> Self {
        self.debug_tags = tags.to_owned();
        self
    }

    /// Starts the instance and waits until it serves. Panics on harness
    /// errors; returns `Err` when ATS itself refuses to start (bad config).
    pub fn start(self) -> Result<TrafficServer, StartError> {
        let mut last = None;
        // A port picked free can be taken before ATS binds it: retry on that only.
        for _ in 0..3 {
            match self.try_start() {
                Ok(ts) => return Ok(ts),
                Err(e) if self.port.is_none() && e.diags.contains("Address already in use") => {
                    last = Some(e)
                }
                // Seen once under a cold CI build's load: traffic_manager's
                // child died at every relaunch before writing a line of
                // diags.log. A fresh runroot and port start normally.
                Err(e) if e.reason.starts_with(SILENT_RELAUNCHES) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn try_start(&self) -> Result<TrafficServer, StartError> {
        let dir = match &self.root {
            Some(p) => {
                let _ = fs::remove_dir_all(p);
                fs::create_dir_all(p).expect("creating the root directory");
                Root::Fixed(p.canonicalize().expect("root path"))
            }
            None => Root::Temp(
                tempfile::Builder::new()
                    .prefix("ats-test-")
                    .tempdir()
                    .expect("temp dir"),
            ),
        };
        let root = dir.path().to_path_buf();
        let root = root.as_path();
        let port = self.port.unwrap_or_else(free_port);
        let tls_port = self.tls.then(free_port);
        self.write_runroot(root, port, tls_port)
            .expect("writing the runroot");
        let runroot = root.join("runroot.yaml");
        let managed = self.manager && ats::has_manager();
        let bin = if managed {
            "traffic_manager"
        } else {
            "traffic_server"
        };
        let bin_path = ats::bin(bin);
        let mut cmd = match self.wrapper.split_first() {
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(&bin_path);
                c
            }
            None => Command::new(&bin_path),
        };
        cmd.env("TS_RUNROOT", &runroot)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(fs::File::create(root.join("stdout.txt")).expect("stdout file"))
            .stderr(fs::File::create(root.join("stderr.txt")).expect("stderr file"))
            // Own process group: the whole tree (manager + server) is killed together.
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (is trafficserver installed? {} selects it)",
                bin_path.display(),
                ats::PREFIX_VAR
            )
        });
        let mut ts = TrafficServer {
            dir,
            port,
            tls_port,
            child: Some(child),
            ctl: self.manager,
            managed,
            first_server_pid: None,
        };
        // What traffic_ctl connects to: traffic_manager's socket (9.x) or
        // traffic_server's JSON-RPC one (10.x).
        let ctl_socket = if !self.manager {
            None
        } else if managed {
            Some(ts.runtime_path("mgmtapi.sock"))
        } else {
            Some(ts.runtime_path("jsonrpc20.sock"))
        };
        let diags = ts.log_path("diags.log");
        let start = Instant::now();
        loop {
            let text = fs::read_to_string(&diags).unwrap_or_default();
            if text.contains(READY) && ctl_socket.as_ref().is_none_or(|s| s.exists()) {
                ts.first_server_pid = ts.server_pid();
                return Ok(ts);
            }
            let exited = match ts.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                _ => None,
            };
            let fatal = text
                .lines()
                .find(|l| l.contains("FATAL") || l.contains("EMERGENCY"));
            let silent = ts.managed
                && text.is_empty()
                && fs::read_to_string(ts.log_path("manager.log"))
                    .unwrap_or_default()
                    .matches("Relaunching proxy")
                    .count()
                    >= 3;
            if exited.is_some() || fatal.is_some() || silent || start.elapsed() > self.start_timeout
            {
                let reason = match (exited, fatal) {
                    (_, Some(line)) => format!("traffic_server failed: {line}"),
                    (Some(status), None) => format!("{bin} exited: {status}"),
                    (None, None) if silent => SILENT_RELAUNCHES.to_owned(),
                    (None, None) => format!("not ready after {:?}", self.start_timeout),
                };
                ts.kill();
                return Err(StartError {
                    reason,
                    diags: ts.all_logs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn write_runroot(&self, root: &Path, port: u16, tls_port: Option<u16>) -> io::Result<()> {
        let etc = root.join("etc");
        for d in ["etc", "log", "run", "cache", "var"] {
            fs::create_dir_all(root.join(d))?;
        }
        let r = root.display();
        let (bin, inc, lib, libexec) = (
            ats::bin_dir(),
            ats::include_dir(),
            ats::lib_dir(),
            ats::plugin_dir(),
        );
        let (bin, inc, lib, libexec) = (
            bin.display(),
            inc.display(),
            lib.display(),
            libexec.display(),
        );
        fs::write(
            root.join("runroot.yaml"),
            format!(
                "prefix: {r}\nexec_prefix: {r}\nbindir: {bin}\nsbindir: {bin}\nsysconfdir: {r}/etc\n\
                 datadir: {r}/var\nincludedir: {inc}\nlibdir: {lib}\n\
                 libexecdir: {libexec}\nlocalstatedir: {r}/var\nruntimedir: {r}/run\n\
                 logdir: {r}/log\ncachedir: {r}/cache\n"
            ),
        )?;
        let mut records: BTreeMap<String, String> = [
            ("proxy.config.http.server_ports", {
                let pp = if self.proxy_protocol { ":pp" } else { "" };
                let mut ports = format!("STRING {port}:ip-in=127.0.0.1{pp}");
                if self.ipv6 {
                    ports.push_str(&format!(" {port}:ipv6:ip-in=[::1]{pp}"));
                }
                if let Some(t) = tls_port {
                    ports.push_str(&format!(" {t}:ssl:ip-in=127.0.0.1"));
                }
                ports
            }),
            ("proxy.config.admin.user_id", "STRING #-1".into()),
            ("proxy.config.crash_log_helper", "STRING NULL".into()),
            ("proxy.config.diags.output.diag", "STRING L".into()),
            ("proxy.config.diags.output.debug", "STRING L".into()),
            ("proxy.config.diags.debug.enabled", "INT 1".into()),
            (
                "proxy.config.diags.debug.tags",
                format!("STRING {}", self.debug_tags),
            ),
            ("proxy.config.url_remap.remap_required", "INT 1".into()),
            ("proxy.config.reverse_proxy.enabled", "INT 1".into()),
            ("proxy.config.exec_thread.autoconfig", "INT 0".into()),
            ("proxy.config.exec_thread.limit", "INT 2".into()),
            ("proxy.config.task_threads", "INT 2".into()),
            ("proxy.config.cache.ram_cache.size", "INT 8388608".into()),
            // Without this, requests in the first moments see no cache at all.
            ("proxy.config.http.wait_for_cache", "INT 1".into()),
            ("proxy.config.http.insert_response_via_str", "INT 0".into()),
            ("proxy.config.log.logging_enabled", "INT 3".into()),
            ("proxy.config.log.max_secs_per_buffer", "INT 1".into()),
            (
                "proxy.config.process_manager.mgmt_port",
                format!("INT {}", free_port()),
            ),
            (
                "proxy.config.admin.synthetic_port",
                format!("INT {}", free_port()),
            ),
            (
                "proxy.config.http.connect_attempts_max_retries",
                "INT 0".into(),
            ),
            ("proxy.config.http.connect_attempts_timeout", "INT 5".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if tls_port.is_some() {
            make_certificate(&etc)?;
            for (k, v) in [
                (
                    "proxy.config.ssl.server.cert.path",
                    format!("STRING {r}/etc"),
                ),
                (
                    "proxy.config.ssl.server.private_key.path",
                    format!("STRING {r}/etc"),
                ),
                (
                    "proxy.config.ssl.server.multicert.filename",
                    format!("STRING {r}/etc/ssl_multicert.config"),
                ),
            ] {
                records.insert(k.to_owned(), v);
            }
        }
        if ats::is_10() {
            // 10 resolves the default (etc/trafficserver/body_factory) against
            // the runroot's prefix, not sysconfdir as 9.2 does.
            records.insert(
                "proxy.config.body_factory.template_sets_dir".into(),
                format!("STRING {r}/etc/body_factory"),
            );
            let mut yaml = BTreeMap::new();
            for (k, v) in records.into_iter().chain(self.records.clone()) {
                if let Some(name) = name_in_10(&k) {
                    yaml.insert(name.to_owned(), v);
                }
            }
            fs::write(etc.join("records.yaml"), records_yaml(&yaml))?;
            // The JSON-RPC server that traffic_ctl talks to, as by default:
            // RUNTIMEDIR/jsonrpc20.sock, for this user and root only.
            fs::write(
                etc.join("jsonrpc.yaml"),
                "rpc:\n  enabled: true\n  unix:\n    restricted_api: true\n",
            )?;
        } else {
            records.extend(self.records.clone());
            let text: String = records
                .iter()
                .map(|(k, v)| format!("CONFIG {k} {v}\n"))
                .collect();
            fs::write(etc.join("records.config"), text)?;
        }
        fs::write(etc.join("remap.config"), &self.remap)?;
        fs::write(etc.join("plugin.config"), &self.plugin_config)?;
        fs::write(etc.join("storage.config"), format!("{}/cache 64M\n", r))?;
        fs::write(
            etc.join("logging.yaml"),
            "logging:\n  formats:\n    - name: test\n      format: '%<cqtq> %<ttms> %<chi> %<crc>/%<pssc> %<cqhm> %<cquc> %<phr>/%<shn>'\n  logs:\n    - filename: access\n      format: test\n      mode: ascii\n",
        )?;
        let defaults = ats::default_config_dir();
        fs::copy(defaults.join("ip_allow.yaml"), etc.join("ip_allow.yaml"))?;
        copy_dir(&defaults.join("body_factory"), &etc.join("body_factory"))?;
        for (name, contents) in &self.files {
            fs::write(etc.join(name), contents)?;
        }
        Ok(())
    }
}

/// A self-signed certificate for `*.test` and its key (`cert.pem`,
/// `key.pem` in `etc`), made by the `openssl` CLI, and the
/// ssl_multicert.config that serves them on every address.
fn make_certificate(etc: &Path) -> io::Result<()> {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=a.test",
            "-addext",
            "subjectAltName=DNS:*.test",
        ])
        .arg("-keyout")
        .arg(etc.join("key.pem"))
        .arg("-out")
        .arg(etc.join("cert.pem"))
        .output()
        .map_err(|e| io::Error::other(format!("cannot run openssl (install it): {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    fs::write(
        etc.join("ssl_multicert.config"),
        "dest_ip=* ssl_cert_name=cert.pem ssl_key_name=key.pem\n",
    )
}

/// records.config names that 10.x renamed ("Configuration Changes" in
/// 10's upgrading notes). Tests keep using the 9.2 names.
const RENAMED_IN_10: &[(&str, &str)] = &[
    (
        "proxy.config.exec_thread.autoconfig",
        "proxy.config.exec_thread.autoconfig.enabled",
    ),
    (
        "proxy.config.output.logfile",
        "proxy.config.output.logfile.name",
    ),
    (
        "proxy.config.tunnel.prewarm",
        "proxy.config.tunnel.prewarm.enabled",
    ),
    (
        "proxy.config.ssl.origin_session_cache",
        "proxy.config.ssl.origin_session_cache.enabled",
    ),
    (
        "proxy.config.ssl.session_cache",
        "proxy.config.ssl.session_cache.mode",
    ),
    (
        "proxy.config.ssl.TLSv1_3",
        "proxy.config.ssl.TLSv1_3.enabled",
    ),
    (
        "proxy.config.ssl.client.TLSv1_3",
        "proxy.config.ssl.client.TLSv1_3.enabled",
    ),
    (
        "proxy.config.http.connect_attempts_max_retries_dead_server",
        "proxy.config.http.connect_attempts_max_retries_down_server",
    ),
    (
        "proxy.config.http.connect.dead.policy",
        "proxy.config.http.connect.down.policy",
    ),
];

/// records.config names that 10.x no longer has (traffic_manager's among
/// them): left out of records.yaml, where 10 would only warn "Unrecognized
/// configuration value" about them.
const GONE_IN_10: &[&str] = &[
    "proxy.config.process_manager.mgmt_port",
    "proxy.config.admin.synthetic_port",
    "proxy.config.http.down_server.abort_threshold",
    "proxy.config.http.parent_proxy.connect_attempts_timeout",
    "proxy.config.http.post_connect_attempts_timeout",
    "proxy.config.http.per_server.connection.queue_size",
    "proxy.config.http.per_server.connection.queue_delay",
    "proxy.config.http.keepalive_internal_vc",
];

/// The 10.x name of a 9.2 record, `None` if 10 has no such record.
fn name_in_10(name: &str) -> Option<&str> {
    if GONE_IN_10.contains(&name) {
        return None;
    }
    Some(
        RENAMED_IN_10
            .iter()
            .find(|(old, _)| *old == name)
            .map_or(name, |(_, new)| new),
    )
}

/// records.yaml text for `records` (full names, records.config typed values
/// such as `INT 1`, `STRING a b`, `FLOAT 0.5`).
///
/// Each record is one dotted key under `records:` (10 builds a record's name
/// by joining the keys on its path with dots, so `diags.debug.enabled: 1`
/// and the nested form are the same record). Every value is a quoted scalar
/// with its YAML type tag: 10 takes the type of a record it knows from its
/// own table and the string as records.config's value (`STRING NULL` still
/// means unset), and sets a record it does not know (a plugin's) only when
/// it is tagged.
fn records_yaml(records: &BTreeMap<String, String>) -> String {
    let mut out = String::from("records:\n");
    for (name, typed) in records {
        let key = name.strip_prefix("proxy.config.").unwrap_or_else(|| {
            panic!("records.yaml holds proxy.config.* records only, not {name:?}")
        });
        assert!(
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'),
            "unexpected record name {name:?}"
        );
        let (ty, value) = typed.split_once(char::is_whitespace).unwrap_or((typed, ""));
        let tag = match ty {
            "INT" | "COUNTER" => "!!int",
            "FLOAT" => "!!float",
            "STRING" => "!!str",
            _ => panic!("record {name}: unknown type in {typed:?} (INT, FLOAT or STRING)"),
        };
        out.push_str(&format!("  {key}: {tag} {}\n", yaml_quoted(value.trim())));
    }
    out
}

/// `s` as a YAML double-quoted scalar.
fn yaml_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// PIDs of the running processes of the instance whose runroot is `root`
/// (traffic_manager, traffic_server), found from any process by their
/// `TS_RUNROOT` environment. A process that is exiting may already be
/// missing: check PIDs found earlier with [`process_alive`].
pub fn runroot_processes(root: &Path) -> Vec<u32> {
    let want = format!("TS_RUNROOT={}", root.join("runroot.yaml").display());
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|&b| b == 0).any(|v| v == want.as_bytes()) && process_alive(pid)
        })
        .collect()
}

/// True while any thread of process `pid` has not exited. The leader of a
/// killed process can be a zombie (its memory and environment gone) while
/// other threads still exit and hold its files, such as a listening socket.
pub fn process_alive(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).any(|t| {
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the `(comm)` field, which may itself hold spaces.
        let state = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().next());
        matches!(state, Some(s) if s != "Z" && s != "X")
    })
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
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

    /// Runs this version's `traffic_ctl` against this instance (needs
    /// [`TsBuilder::with_manager`]).
    pub fn traffic_ctl(&self, args: &[&str]) -> Output {
        assert!(
            self.ctl,
            "traffic_ctl needs the instance started with_manager()"
        );
        Command::new(ats::bin("traffic_ctl"))
            .args(args)
            .env("TS_RUNROOT", self.dir.path().join("runroot.yaml"))
            .output()
            .expect("cannot run traffic_ctl")
    }

    /// Sends `traffic_ctl plugin msg TAG "@ID COMMAND"` with a fresh request
    /// id and returns the answer: its lines in `<plugin>_ctl.log` (`plugin`
    /// is the tag up to its first dot) joined into one JSON object (see
    /// [`join_answer`]). Panics if the answer is not whole within 30 s.
    pub fn plugin_msg(&self, tag: &str, command: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = format!(
            "t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let plugin = tag.split('.').next().unwrap_or(tag);
        let log = format!("{plugin}_ctl.log");
        let out = self.traffic_ctl(&["plugin", "msg", tag, &format!("@{id} {command}")]);
        assert!(out.status.success(), "traffic_ctl: {out:?}");
        let found = self.wait_for_log(&log, Duration::from_secs(30), |t| {
            join_answer(t, &id).is_some()
        });
        let text = self.log(&log);
        assert!(
            found,
            "no whole answer to {command:?} (request {id}) in {log}: {text}"
        );
        let answer = join_answer(&text, &id).unwrap_or_default();
        assert!(
            answer.contains(&format!(
                "\"command\":{}",
                serde_json::json!(format!("{tag} {command}"))
            )),
            "the answer echoes the command: {answer}"
        );
        answer
    }

    /// Current value of a metric, through `traffic_ctl metric get`: both
    /// 9.2 and 10.x print `NAME VALUE` (nothing on stdout for an unknown
    /// metric).
    pub fn metric(&self, name: &str) -> Option<i64> {
        let out = self.traffic_ctl(&["metric", "get", name]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| match l.trim().split_once(char::is_whitespace) {
                Some((n, v)) if n == name => Some(v.trim()),
                _ => None,
            })
            .and_then(|v| v.parse().ok())
    }

    /// Waits until metric `name` reads `expected`. In 9.2 a plugin metric
    /// reaches `traffic_ctl` through two 5 s sync cycles (raw stats, then the
    /// manager), so values lag up to ~10 s; 10.x reads them live. Returns
    /// the last value read.
    pub fn wait_metric(&self, name: &str, expected: i64) -> Result<i64, Option<i64>> {
        let mut last = None;
        if wait_until(Duration::from_secs(25), || {
            last = self.metric(name);
            last == Some(expected)
        }) {
            Ok(expected)
        } else {
            Err(last)
        }
    }

    /// Waits until every `witnesses` metric reads its value, then until every
    /// `expected` one does. For checks that a gauge came back down to 0: in
    /// 9.2 a metric that has not synced yet also reads 0, so a 0 proves
    /// nothing until a later snapshot is known to be visible. A witness is a
    /// counter with a known final value, not 0, that the code bumps after
    /// the gauge's increments (rate_limit bumps `admitted` after `active`,
    /// `queued` after `waiting`): once it reads final, so do those increments,
    /// and a 0 then means they were all undone.
    pub fn wait_metrics_after(
        &self,
        witnesses: &[(&str, i64)],
        expected: &[(&str, i64)],
    ) -> Result<(), String> {
        if witnesses.is_empty() {
            return Err("no witness: a 0 read now could be a metric not synced yet".into());
        }
        for &(name, want) in witnesses {
            if want == 0 {
                return Err(format!(
                    "witness {name} = 0 proves nothing: unsynced metrics read 0"
                ));
            }
            self.wait_metric(name, want)
                .map_err(|last| format!("witness {name}: expected {want}, last read {last:?}"))?;
        }
        for &(name, want) in expected {
            self.wait_metric(name, want).map_err(|last| {
                format!(
                    "{name}: expected {want}, last read {last:?} (witnesses synced: {witnesses:?})"
                )
            })?;
        }
        Ok(())
    }

    /// Writes a new remap.config and reloads it with `traffic_ctl config
    /// reload`. `Ok` once ATS logged it loaded the new file; `Err` with the
    /// diags.log lines of the attempt if ATS refused it (the old rules stay).
    /// 9.2 and 10.1 log the same NOTE / ERROR lines.
    pub fn reload_remap(&self, remap: &str) -> Result<(), String> {
        const DONE: &str = "remap.config finished loading";
        const FAILED: &str = "remap.config failed to load";
        let before = self.diags().len();
        fs::write(self.config_dir().join("remap.config"), remap).map_err(|e| e.to_string())?;
        let out = self.traffic_ctl(&["config", "reload"]);
        if !out.status.success() {
            return Err(format!(
                "traffic_ctl config reload: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut outcome = None;
        wait_until(Duration::from_secs(15), || {
            let text = self.diags();
            let new = text.get(before..).unwrap_or_default();
            if new.contains(FAILED) {
                outcome = Some(Err(new.to_owned()));
            } else if new.contains(DONE) {
                outcome = Some(Ok(()));
            }
            outcome.is_some()
        });
        outcome.unwrap_or_else(|| Err("remap.config was not reloaded within 15 s".into()))
    }

    /// traffic_server's resident memory in kB (`VmRSS`).
    pub fn rss_kb(&self) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.server_pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// PID of the traffic_server process (not the manager).
    pub fn server_pid(&self) -> Option<u32> {
        if !self.managed {
            return self.child.as_ref().map(|c| c.id());
        }
        let lock = fs::read_to_string(self.runtime_path("server.lock")).ok()?;
        lock.trim().parse().ok()
    }

    /// True while traffic_server is running and, under the manager, is the
    /// same process that started (traffic_manager restarts a crashed one,
    /// with a new pid in server.lock and a second READY line in diags.log).
    pub fn is_running(&mut self) -> bool {
        let child = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
        if !self.managed {
            return child;
        }
        let Some(first) = self.first_server_pid else {
            return false;
        };
        child
            && self.server_pid() == Some(first)
            && process_alive(first)
            && self.diags().matches(READY).count() == 1
    }

    fn kill(&mut self) {
        // Found now, while alive: a dying process loses its environment first.
        let started = runroot_processes(self.dir.path());
        if let Some(mut child) = self.child.take() {
            // The whole process group at once: traffic_manager would restart a
            // traffic_server killed alone. kill(1) avoids unsafe here.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        // Until every thread has exited (a zombie leader's other threads can
        // still hold the port), killing any process of this root outside the
        // group. Bounded: 50 rounds of 100 ms.
        for _ in 0..50 {
            let strays = runroot_processes(self.dir.path());
            if strays.is_empty() && !started.iter().any(|&p| process_alive(p)) {
                break;
            }
            if !strays.is_empty() {
                let mut kill = Command::new("kill");
                kill.arg("-KILL").arg("--");
                for pid in &strays {
                    kill.arg(pid.to_string());
                }
                let _ = kill.stderr(Stdio::null()).status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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

impl Drop for TrafficServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "=== traffic_server logs ({}) ===\n{}",
                self.dir.path().display(),
                self.all_logs()
            );
        }
    }
}

/// The answer to request `id` in a `<plugin>_ctl.log` text, its lines
/// joined as docs/rate_limit.md ("Live control") says: by `split` array or
/// by `chunk` (without the `part`, `parts` and `split` fields); `None`
/// until every part is there.
pub fn join_answer(log: &str, id: &str) -> Option<String> {
    use serde_json::Value;
    let mut parts: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["request"].as_str() == Some(id))
        .collect();
    let n = parts.first()?["parts"].as_u64()? as usize;
    parts.sort_by_key(|p| p["part"].as_u64());
    parts.dedup_by_key(|p| p["part"].as_u64());
    if parts.len() != n || (1..=n).any(|i| parts[i - 1]["part"].as_u64() != Some(i as u64)) {
        return None;
    }
    let mut out = if parts[0].get("chunk").is_some() {
        let text: String = parts.iter().filter_map(|p| p["chunk"].as_str()).collect();
        serde_json::from_str(&text).ok()?
    } else {
        let mut out = parts[0].clone();
        if let Some(name) = parts[0]["split"].as_str() {
            let all: Vec<Value> = parts
                .iter()
                .flat_map(|p| p[name].as_array().cloned().unwrap_or_default())
                .collect();
            out[name] = Value::Array(all);
        }
        out
    };
    let o = out.as_object_mut()?;
    for k in ["part", "parts", "split"] {
        o.remove(k);
    }
    Some(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_tagged_dotted_yaml_keys_with_10_names() {
        let records: BTreeMap<String, String> = [
            ("proxy.config.admin.user_id", "STRING #-1"),
            ("proxy.config.crash_log_helper", "STRING NULL"),
            ("proxy.config.proxy_name", "STRING a \"b\" \\c"),
            ("proxy.config.diags.debug.tags", "STRING "),
            ("proxy.config.net.poll_timeout", "INT 10"),
            ("proxy.config.http.cache.heuristic_lm_factor", "FLOAT 0.5"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            records_yaml(&records),
            "records:\n  \
             admin.user_id: !!str \"#-1\"\n  \
             crash_log_helper: !!str \"NULL\"\n  \
             diags.debug.tags: !!str \"\"\n  \
             http.cache.heuristic_lm_factor: !!float \"0.5\"\n  \
             net.poll_timeout: !!int \"10\"\n  \
             proxy_name: !!str \"a \\\"b\\\" \\\\c\"\n"
        );
        assert_eq!(
            name_in_10("proxy.config.exec_thread.autoconfig"),
            Some("proxy.config.exec_thread.autoconfig.enabled")
        );
        assert_eq!(name_in_10("proxy.config.process_manager.mgmt_port"), None);
        assert_eq!(
            name_in_10("proxy.config.exec_thread.limit"),
            Some("proxy.config.exec_thread.limit")
        );
    }
}
