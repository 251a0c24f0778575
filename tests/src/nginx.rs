//! nginx for side-by-side tests (rate_limit.so against `limit_req`): a child
//! process with its own temporary prefix, config, pid and error log, on a
//! loopback port, serving `GET /ok` (a 3-byte static file) from whatever
//! `server` blocks the test gives.
//!
//! It runs with `master_process off`: one process, no `user` switch when
//! started as root, gone with the one signal `Child::kill` sends.
//! `limit_req` zones live in shared memory, which works the same there.
//!
//! nginx is a test prerequisite (`ci/test.sh` installs it). Run without it,
//! [`Nginx::start`] installs it with `ci/install-deps.sh nginx-light`, the
//! way every other package gets installed (as root; otherwise that script
//! prints the `apt-get` line to run, and the test fails with it).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// Temp-path directives that `nginx -V` shows were compiled in with an
/// absolute default (e.g. /var/lib/nginx/body): nginx creates those at start
/// and fails without permission, so each is pointed into our prefix.
const TEMP_PATHS: &[(&str, &str)] = &[
    ("--http-client-body-temp-path", "client_body_temp_path"),
    ("--http-proxy-temp-path", "proxy_temp_path"),
    ("--http-fastcgi-temp-path", "fastcgi_temp_path"),
    ("--http-uwsgi-temp-path", "uwsgi_temp_path"),
    ("--http-scgi-temp-path", "scgi_temp_path"),
];

/// `nginx -V` (its build flags), installing nginx first if it is missing.
fn build_flags() -> Result<String, String> {
    static FLAGS: OnceLock<Result<String, String>> = OnceLock::new();
    FLAGS
        .get_or_init(|| {
            let flags = || {
                let out = Command::new("nginx").arg("-V").output().ok()?;
                // nginx prints -V on stderr.
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stderr).into_owned())
            };
            if let Some(f) = flags() {
                return Ok(f);
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/install-deps.sh");
            let out = Command::new(&script)
                .arg("nginx-light")
                .output()
                .map_err(|e| format!("nginx is missing and {} failed: {e}", script.display()))?;
            flags().ok_or_else(|| {
                format!(
                    "nginx is missing and `ci/install-deps.sh nginx-light` did not install it:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .clone()
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// The whole nginx.conf: pid and error log in `dir`, the compiled-in temp
/// paths pointed into `dir`, `main` at top level, and `http` in `http { }`
/// with every `{listen}` made this instance's `listen` directive.
fn config(dir: &Path, port: u16, build_flags: &str, main: &str, http: &str) -> String {
    let d = dir.display();
    let temp: String = TEMP_PATHS
        .iter()
        .filter(|(flag, _)| build_flags.contains(flag))
        .map(|(_, directive)| format!("    {directive} {d}/{directive};\n"))
        .collect();
    let http = http.replace("{listen}", &format!("listen 127.0.0.1:{port};"));
    format!(
        "pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n{main}\n\
         http {{\n    access_log off;\n    default_type text/plain;\n    root {d}/html;\n{temp}{http}\n}}\n"
    )
}

impl Nginx {
    /// Starts nginx with `http` inside its `http { }` block and waits until
    /// it answers. Every `{listen}` in `http` becomes the `listen` directive
    /// of this instance's port; `root` is the directory holding `ok`.
    pub fn start(http: &str) -> Result<Nginx, String> {
        Self::start_with("events { worker_connections 1024; }", http)
    }

    /// As [`Nginx::start`], with `main` as the top-level directives (at
    /// least the `events` block): e.g. the load bench's larger limits.
    pub fn start_with(main: &str, http: &str) -> Result<Nginx, String> {
        let flags = build_flags()?;
        let mut last = String::new();
        // The free port can be taken before nginx binds it: retry on that.
        for _ in 0..3 {
            match Self::try_start(&flags, main, http) {
                Ok(n) => return Ok(n),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn try_start(flags: &str, main: &str, http: &str) -> Result<Nginx, String> {
        let dir = tempfile::Builder::new()
            .prefix("ats-test-nginx-")
            .tempdir()
            .map_err(|e| format!("temp dir for nginx: {e}"))?;
        let port = free_port()?;
        let conf = config(dir.path(), port, flags, main, http);
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        fs::create_dir(dir.path().join("html")).map_err(|e| io("html dir", e))?;
        fs::write(dir.path().join("html/ok"), "ok\n").map_err(|e| io("html/ok", e))?;
        let conf_path = dir.path().join("nginx.conf");
        fs::write(&conf_path, conf).map_err(|e| io("nginx.conf", e))?;
        let log = |name: &str| fs::File::create(dir.path().join(name)).map_err(|e| io(name, e));
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(log("stdout.txt")?)
            .stderr(log("stderr.txt")?)
            .spawn()
            .map_err(|e| format!("cannot run nginx: {e}"))?;
        let mut n = Nginx { child, port, dir };
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            // A connection, not a request: a request would spend a token
            // of some test's limit_req zone.
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(n);
            }
            let exited = n.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > end {
                return Err(format!(
                    "nginx did not start ({}):\n{}",
                    exited.map_or("no answer after 10 s".into(), |s| s.to_string()),
                    n.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// error.log and stderr, for failure reports.
    pub fn logs(&self) -> String {
        ["error.log", "stderr.txt"]
            .iter()
            .map(|f| fs::read_to_string(self.dir.path().join(f)).unwrap_or_default())
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("=== nginx logs ===\n{}", self.logs());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_points_compiled_temp_paths_into_the_prefix() {
        let c = config(
            Path::new("/tmp/x"),
            1234,
            "--http-proxy-temp-path=/var/lib/nginx/proxy",
            "events { worker_connections 8; }",
            "server { {listen} }",
        );
        assert!(c.contains("proxy_temp_path /tmp/x/proxy_temp_path;"));
        assert!(!c.contains("uwsgi_temp_path"));
        assert!(c.contains("server { listen 127.0.0.1:1234; }"));
        assert!(c.contains("events { worker_connections 8; }"));
    }
}
