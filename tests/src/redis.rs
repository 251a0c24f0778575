//! redis-server for the store tests: a child process with its own directory
//! and loopback port, no persistence, killed on drop; it can be stopped and
//! started again on the same port (outage tests). [`DelayProxy`] is a
//! loopback TCP relay in front of it that delays every chunk from the
//! server (a slow Redis).
//!
//! redis-server is a test prerequisite (`ci/test.sh` installs it). Run
//! without it, [`Redis::start`] installs it with `ci/install-deps.sh
//! redis-server redis-tools`, as nginx is.

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

pub struct Redis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// More redis-server arguments (a Cluster node's).
    extra: Vec<String>,
}

/// Installs `packages` with `ci/install-deps.sh` if `cmd ARGS` does not
/// run (checked once per command and test binary).
pub(crate) fn ensure_package(cmd: &str, args: &[&str], packages: &[&str]) -> Result<(), String> {
    static DONE: std::sync::Mutex<Vec<(String, Result<(), String>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = done.iter().find(|(c, _)| c == cmd) {
        return r.clone();
    }
    let present = || {
        Command::new(cmd)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let r = if present() {
        Ok(())
    } else {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/install-deps.sh");
        match Command::new(&script).args(packages).output() {
            Err(e) => Err(format!(
                "{cmd} is missing and {} failed: {e}",
                script.display()
            )),
            Ok(_) if present() => Ok(()),
            Ok(out) => Err(format!(
                "{cmd} is missing and `ci/install-deps.sh {}` did not install it:\n{}{}",
                packages.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    };
    done.push((cmd.to_owned(), r.clone()));
    r
}

/// Installs redis-server if it is missing.
pub(crate) fn ensure_installed() -> Result<(), String> {
    ensure_package(
        "redis-server",
        &["--version"],
        &["redis-server", "redis-tools"],
    )
}

pub(crate) fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl Redis {
    /// Starts redis-server on a free loopback port and waits until it answers PING.
    pub fn start() -> Result<Redis, String> {
        Redis::start_with(&[], free_port)
    }

    /// Starts redis-server with `extra` arguments on a port from `port`.
    pub(crate) fn start_with(
        extra: &[&str],
        port: fn() -> Result<u16, String>,
    ) -> Result<Redis, String> {
        ensure_installed()?;
        let mut last = String::new();
        // The free port can be taken before redis binds it: retry on that.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("ats-test-redis-")
                .tempdir()
                .map_err(|e| format!("temp dir for redis: {e}"))?;
            let mut r = Redis {
                child: None,
                port: port()?,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            match r.restart() {
                Ok(()) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Starts the server again on the same port (after [`Redis::stop`]).
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let d = self.dir.path();
        let log = |name: &str| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d.join(name))
                .map_err(|e| format!("{name}: {e}"))
        };
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(d)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--logfile", "redis.log", "--protected-mode", "no"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log("stdout.txt")?)
            .stderr(log("stderr.txt")?)
            .spawn()
            .map_err(|e| format!("cannot run redis-server: {e}"))?;
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if self.ping() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > end {
                return Err(format!(
                    "redis-server did not start ({}):\n{}",
                    exited.map_or("no answer after 10 s".into(), |s| s.to_string()),
                    self.logs()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: an outage, not a shutdown).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes (`SIGSTOP`, true) or thaws (`SIGCONT`, false) the server:
    /// connections stay open and nothing answers (a hung server).
    pub fn freeze(&self, frozen: bool) -> Result<(), String> {
        let pid = self.child.as_ref().ok_or("not running")?.id();
        let sig = if frozen { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(())
            .ok_or_else(|| format!("kill {sig} {pid} failed"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends one command (inline protocol) and returns the raw answer.
    pub fn command(&self, args: &[&str]) -> Result<String, String> {
        let mut s = self.connect().map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// An integer answer (`ZCARD`, `DBSIZE`, ...).
    pub fn int(&self, args: &[&str]) -> Result<i64, String> {
        let a = self.command(args)?;
        a.strip_prefix(':')
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("{args:?}: not an integer: {a:?}"))
    }

    /// A connection of the harness's own, from [`HARNESS_SOURCE`].
    fn connect(&self) -> std::io::Result<TcpStream> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.bind(&std::net::SocketAddr::from((HARNESS_SOURCE, 0)).into())?;
        sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], self.port)).into())?;
        Ok(sock.into())
    }

    /// Connections open to the server (`CLIENT LIST`) but the harness's:
    /// the one that asks, and earlier ones the server may not have seen
    /// closed yet (a loaded machine).
    pub fn clients(&self) -> Result<usize, String> {
        let list = self.command(&["CLIENT", "LIST"])?;
        if !list.contains("id=") {
            return Err(format!("CLIENT LIST: unexpected answer {list:?}"));
        }
        let harness = format!("addr={HARNESS_SOURCE}:");
        Ok(list
            .lines()
            .filter(|l| l.contains("id=") && !l.contains(&harness))
            .count())
    }

    fn ping(&self) -> bool {
        self.command(&["PING"])
            .is_ok_and(|a| a.starts_with("+PONG"))
    }

    pub fn logs(&self) -> String {
        ["redis.log", "stderr.txt"]
            .iter()
            .map(|f| fs::read_to_string(self.dir.path().join(f)).unwrap_or_default())
            .collect()
    }
}

/// The source address of the harness's own connections to a server (the
/// plugins' come from 127.0.0.1), so [`Redis::clients`] can leave them out.
pub const HARNESS_SOURCE: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 253);

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!("=== redis logs ===\n{}", self.logs());
        }
    }
}

/// A loopback TCP relay that delays what the server sends by `delay` (a
/// slow store). Stopped, with its connections, on drop.
pub struct DelayProxy {
    port: u16,
    stop: Arc<AtomicBool>,
}

/// How the relay slows the server's answers.
#[derive(Clone, Copy)]
enum Slow {
    /// Each chunk held this long.
    Chunk(Duration),
    /// Sent a byte at a time, this long apart (a server that drips).
    Drip(Duration),
}

impl DelayProxy {
    pub fn start(target_port: u16, delay: Duration) -> Result<DelayProxy, String> {
        Self::spawn(target_port, Slow::Chunk(delay))
    }

    /// A relay that sends the server's answers a byte every `per_byte`.
    pub fn drip(target_port: u16, per_byte: Duration) -> Result<DelayProxy, String> {
        Self::spawn(target_port, Slow::Drip(per_byte))
    }

    fn spawn(target_port: u16, delay: Slow) -> Result<DelayProxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        thread::spawn(move || {
            while !st.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) {
                            relay(client, server, delay, st.clone());
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(DelayProxy { port, stop })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn relay(client: TcpStream, server: TcpStream, slow: Slow, stop: Arc<AtomicBool>) {
    let pipe = move |mut from: TcpStream, mut to: TcpStream, slow: Slow, stop: Arc<AtomicBool>| {
        let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
        let mut buf = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Acquire) {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let sent = match slow {
                        Slow::Chunk(d) => {
                            thread::sleep(d);
                            to.write_all(&buf[..n])
                        }
                        Slow::Drip(d) => buf[..n].iter().try_for_each(|b| {
                            thread::sleep(d);
                            to.write_all(std::slice::from_ref(b))
                        }),
                    };
                    if sent.is_err() || stop.load(Ordering::Acquire) {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    };
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let st = stop.clone();
    thread::spawn(move || pipe(client, s2, Slow::Chunk(Duration::ZERO), st));
    thread::spawn(move || pipe(server, c2, slow, stop));
}
