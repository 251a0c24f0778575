//! nginx as the fast origin: a child process with its own temporary prefix,
//! config, pid and error log, bound to 127.0.0.1 only.
//!
//! | path            | response                                              |
//! |-----------------|-------------------------------------------------------|
//! | `/hit`          | 200, small body, `Cache-Control: public, max-age=86400` |
//! | `/miss`         | 200, same body, `Cache-Control: no-store`             |
//! | `/nginx_status` | stub_status (its request counter checks hit/miss)     |
//!
//! It runs with `master_process off`: a single process, so it serves like
//! one worker, needs no `user` switch when started as root (no worker to
//! drop privileges), and dies with the one signal `Child::kill` sends.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ats_tests::client;

/// The body of both paths: small, so the bench measures request handling
/// rather than copying.
pub const BODY: &str = "ats-bench origin: a small static body of exactly 64 bytes......\n";

pub struct Nginx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
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

fn config(dir: &Path, port: u16, build_flags: &str) -> String {
    let d = dir.display();
    let temp: String = TEMP_PATHS
        .iter()
        .filter(|(flag, _)| build_flags.contains(flag))
        .map(|(_, directive)| format!("    {directive} {d}/{directive};\n"))
        .collect();
    format!(
        "pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         worker_rlimit_nofile 8192;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
         \x20   access_log off;\n\
         \x20   default_type text/plain;\n\
         \x20   # ATS keeps its origin connections: never make it reconnect mid-run.\n\
         \x20   keepalive_requests 100000000;\n\
         \x20   keepalive_timeout 600s;\n\
         {temp}\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{port};\n\
         \x20       location = /hit {{ add_header Cache-Control \"public, max-age=86400\" always; return 200 \"{BODY}\"; }}\n\
         \x20       location = /miss {{ add_header Cache-Control \"no-store\" always; return 200 \"{BODY}\"; }}\n\
         \x20       location = /nginx_status {{ stub_status; }}\n\
         \x20   }}\n\
         }}\n"
    )
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl Nginx {
    /// Starts nginx and waits until it answers.
    pub fn start() -> Result<Nginx, String> {
        let flags = crate::sys::command_output("nginx", &["-V"]).ok_or(
            "cannot run nginx (install it: apt-get install nginx-light, or run ci/bench.sh)",
        )?;
        let mut last = String::new();
        // The free port can be taken before nginx binds it: retry on that.
        for _ in 0..3 {
            match Self::try_start(&flags) {
                Ok(n) => return Ok(n),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn try_start(flags: &str) -> Result<Nginx, String> {
        let dir = tempfile::Builder::new()
            .prefix("ats-bench-nginx-")
            .tempdir()
            .map_err(|e| format!("temp dir for nginx: {e}"))?;
        let port = free_port()?;
        let conf = dir.path().join("nginx.conf");
        fs::write(&conf, config(dir.path(), port, flags))
            .map_err(|e| format!("writing {}: {e}", conf.display()))?;
        let log = |name: &str| {
            fs::File::create(dir.path().join(name)).map_err(|e| format!("creating {name}: {e}"))
        };
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(log("stdout.txt")?)
            .stderr(log("stderr.txt")?)
            .spawn()
            .map_err(|e| format!("cannot run nginx: {e}"))?;
        let mut n = Nginx {
            child,
            port,
            _dir: dir,
        };
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if n.requests().is_ok() {
                return Ok(n);
            }
            let exited = n.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > end {
                let logs = ["error.log", "stderr.txt"]
                    .iter()
                    .map(|f| fs::read_to_string(n._dir.path().join(f)).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("");
                return Err(format!(
                    "nginx did not start ({}):\n{logs}",
                    exited.map_or("no answer after 10 s".into(), |s| s.to_string())
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:<port>`, for remap rules and direct wrk runs.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// nginx's count of requests served so far (stub_status), including the
    /// status request that reads it.
    pub fn requests(&self) -> Result<u64, String> {
        let r = client::get(self.port, "127.0.0.1", "/nginx_status", &[])
            .map_err(|e| format!("nginx status: {e}"))?;
        if r.status != 200 {
            return Err(format!("nginx status: HTTP {}", r.status));
        }
        parse_requests(&r.body_text()).ok_or_else(|| format!("nginx status: {}", r.body_text()))
    }
}

/// The third number of the line after "server accepts handled requests".
fn parse_requests(status: &str) -> Option<u64> {
    let mut lines = status.lines();
    lines.find(|l| l.trim_start().starts_with("server accepts"))?;
    lines.next()?.split_whitespace().nth(2)?.parse().ok()
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_request_counter() {
        let s = "Active connections: 1 \nserver accepts handled requests\n 16 16 31 \nReading: 0 Writing: 1 Waiting: 0 \n";
        assert_eq!(parse_requests(s), Some(31));
        assert_eq!(parse_requests("nope"), None);
    }

    #[test]
    fn config_points_compiled_temp_paths_into_the_prefix() {
        let c = config(
            Path::new("/tmp/x"),
            1234,
            "--http-proxy-temp-path=/var/lib/nginx/proxy",
        );
        assert!(c.contains("proxy_temp_path /tmp/x/proxy_temp_path;"));
        assert!(!c.contains("uwsgi_temp_path"));
        assert!(c.contains("listen 127.0.0.1:1234;"));
        assert_eq!(BODY.len(), 64);
    }
}
