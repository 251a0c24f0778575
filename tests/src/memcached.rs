//! memcached for the store tests: a child process on its own loopback port,
//! killed on drop; it can be stopped and started again on the same port
//! (outage tests). memcached is a test prerequisite (`ci/test.sh` installs
//! it); run without it, [`Memcached::start`] installs it with
//! `ci/install-deps.sh memcached`, as redis-server and nginx are.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::redis::{ensure_package, free_port};

pub struct Memcached {
    child: Option<Child>,
    port: u16,
}

impl Memcached {
    /// Starts memcached (64 MB, loopback) and waits until it answers.
    pub fn start() -> Result<Memcached, String> {
        ensure_package("memcached", &["-h"], &["memcached"])?;
        let mut last = String::new();
        // The free port can be taken before memcached binds it: retry.
        for _ in 0..3 {
            let mut m = Memcached {
                child: None,
                port: free_port()?,
            };
            match m.restart() {
                Ok(()) => return Ok(m),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Starts the server again on the same port (after [`Memcached::stop`]),
    /// empty.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let child = Command::new("memcached")
            .args(["-l", "127.0.0.1", "-U", "0", "-m", "64", "-u", "root", "-p"])
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run memcached: {e}"))?;
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if self
                .command("version")
                .is_ok_and(|a| a.starts_with("VERSION"))
            {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let mut err = String::new();
                if let Some(mut e) = self.child.take().and_then(|mut c| c.stderr.take()) {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("memcached exited ({status}): {err}"));
            }
            if Instant::now() > end {
                return Err("memcached did not answer within 10 s".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: an outage).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `memcached://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("memcached://127.0.0.1:{}", self.port)
    }

    /// Sends one text-protocol command and returns the answer (one read).
    pub fn command(&self, cmd: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.write_all(format!("{cmd}\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 16 * 1024];
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<String>, String> {
        let a = self.command(&format!("get {key}"))?;
        let mut lines = a.split("\r\n");
        match lines.next() {
            Some("END") => Ok(None),
            Some(l) if l.starts_with("VALUE ") => Ok(lines.next().map(str::to_owned)),
            _ => Err(format!("get {key}: {a:?}")),
        }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.stop();
    }
}
