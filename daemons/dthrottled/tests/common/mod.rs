//! Starts the real `dthrottled` binary on loopback and talks to it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const SECRET: &[u8] = b"integration-test-secret-0123456789";

pub struct Daemon {
    child: Child,
    pub tcp: SocketAddr,
    pub peer: Option<SocketAddr>,
    pub dir: PathBuf,
}

/// A fresh directory for one daemon's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dthrottled-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// A UDP port free now on 127.0.0.1 (for peers that must name each other).
pub fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    s.local_addr().map_or(0, |a| a.port())
}

impl Daemon {
    /// Starts the daemon with `config` (plus a TCP listener on a free port
    /// and the test secret file) and waits for its startup lines.
    pub fn start(name: &str, config: &str) -> Daemon {
        let dir = temp_dir(name);
        let secret = dir.join("secret");
        std::fs::write(&secret, SECRET).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("dthrottled.conf");
        let text = format!(
            "listen_tcp = 127.0.0.1:0\npeer_secret_file = {}\n{config}",
            secret.display()
        );
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_dthrottled"))
            .arg("--config")
            .arg(&file)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting dthrottled: {e}"));
        let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let peering = config.contains("peers =") || config.contains("peer_group =");
        let unix = config.contains("listen_unix =");
        let (mut tcp, mut peer, mut seen) = (None, None, Vec::new());
        let mut unix_ready = false;
        while tcp.is_none() || (peering && peer.is_none()) || (unix && !unix_ready) {
            let line = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| {
                    panic!("dthrottled did not start; it said {seen:?} (config:\n{config})")
                });
            seen.push(line.clone());
            if let Some(a) = line.strip_prefix("dthrottled: listening on tcp ") {
                tcp = a.parse().ok();
            } else if line.starts_with("dthrottled: listening on unix ") {
                unix_ready = true;
            } else if let Some(a) = line.strip_prefix("dthrottled: peer socket ") {
                peer = a.parse().ok();
            } else if line.contains("disabled") || line.contains("error") {
                panic!("{line}");
            }
        }
        // Keep draining stderr (stats lines) so the daemon never blocks on it.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Daemon {
            child,
            tcp: tcp.unwrap_or_else(|| panic!("no tcp address")),
            peer,
            dir,
        }
    }

    pub fn connect(&self) -> Client {
        Client::tcp(self.tcp)
    }

    /// File descriptors the daemon has open now.
    pub fn open_descriptors(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.child.id());
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .count()
    }

    /// Kills the daemon (this test's own child, by its handle).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Client {
    s: Box<dyn ReadWrite>,
}

pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

impl Client {
    pub fn tcp(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        Client { s: Box::new(s) }
    }

    pub fn unix(path: &std::path::Path) -> Client {
        let s = std::os::unix::net::UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        Client { s: Box::new(s) }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// Reads exactly `n` answers (3 bytes each).
    pub fn answers(&mut self, n: usize) -> String {
        let mut buf = vec![0u8; 3 * n];
        self.s
            .read_exact(&mut buf)
            .unwrap_or_else(|e| panic!("reading {n} answers: {e}"));
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// One request, one answer: true for OK.
    pub fn ask(&mut self, tag: &str) -> bool {
        self.send(format!("{tag}\n").as_bytes());
        match self.answers(1).as_str() {
            "OK\n" => true,
            "NO\n" => false,
            other => panic!("answer {other:?}"),
        }
    }

    /// One request; `None` if the connection fails or closes.
    pub fn try_ask(&mut self, tag: &str) -> Option<bool> {
        self.s.write_all(format!("{tag}\n").as_bytes()).ok()?;
        let mut buf = [0u8; 3];
        self.s.read_exact(&mut buf).ok()?;
        Some(&buf == b"OK\n")
    }

    /// Whether the daemon closed the connection: EOF or a reset, not a
    /// read timeout.
    pub fn eof(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }

    /// Whether the daemon closed the connection (EOF) within the timeout.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

/// `n` answers of `a` then `m` of `b`, as the daemon writes them.
pub fn pattern(ok: usize, no: usize) -> String {
    "OK\n".repeat(ok) + &"NO\n".repeat(no)
}
