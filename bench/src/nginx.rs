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

use ats_tests::client;

/// The body of both paths: small, so the bench measures request handling
/// rather than copying.
pub const BODY: &str = "ats-bench origin: a small static body of exactly 64 bytes......\n";

/// The test harness's nginx (own prefix, pid, logs and loopback port), with
/// the bench's limits and paths.
pub struct Nginx(ats_tests::nginx::Nginx);

/// More connections than the test default: wrk opens hundreds.
const MAIN: &str = "worker_rlimit_nofile 8192;\nevents { worker_connections 4096; }";

fn http() -> String {
    format!(
        "    # ATS keeps its origin connections: never make it reconnect mid-run.\n\
         \x20   keepalive_requests 100000000;\n\
         \x20   keepalive_timeout 600s;\n\
         \x20   server {{\n\
         \x20       {{listen}}\n\
         \x20       location = /hit {{ add_header Cache-Control \"public, max-age=86400\" always; return 200 \"{BODY}\"; }}\n\
         \x20       location = /miss {{ add_header Cache-Control \"no-store\" always; return 200 \"{BODY}\"; }}\n\
         \x20       location = /nginx_status {{ stub_status; }}\n\
         \x20   }}\n"
    )
}

impl Nginx {
    /// Starts nginx and waits until it answers (installing it if missing).
    pub fn start() -> Result<Nginx, String> {
        ats_tests::nginx::Nginx::start_with(MAIN, &http()).map(Nginx)
    }

    /// `http://127.0.0.1:<port>`, for remap rules and direct wrk runs.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.0.port())
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// nginx's count of requests served so far (stub_status), including the
    /// status request that reads it.
    pub fn requests(&self) -> Result<u64, String> {
        let r = client::get(self.0.port(), "127.0.0.1", "/nginx_status", &[])
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
    fn the_bench_paths_and_body() {
        let h = http();
        assert!(h.contains("{listen}"), "the harness puts the port there");
        assert!(h.contains("location = /hit") && h.contains("location = /miss"));
        assert_eq!(BODY.len(), 64);
    }
}
