//! A loopback origin whose responses the test controls per request, through
//! request headers that ATS forwards:
//!
//! | header            | effect                                   | default      |
//! |-------------------|------------------------------------------|--------------|
//! | `X-Origin-Delay`  | milliseconds to wait before answering    | 0            |
//! | `X-Origin-Status` | response status                          | 200          |
//! | `X-Origin-Range-Status` | status when the request has `Range` | `X-Origin-Status` |
//! | `X-Origin-CC`     | `Cache-Control` of the response          | `no-store`   |
//! | `X-Origin-Body`   | body size in bytes                       | 3 (`ok\n`)   |
//!
//! A login endpoint: a path starting with `/login` answers 401 unless the
//! request carries `X-Password: good` (then 200), whatever `X-Origin-Status`
//! says.
//!
//! Defaults can be changed with [`Origin::set_default`]. Every request is
//! recorded ([`Received`]) with arrival/finish times, and the origin tracks
//! how many requests it is serving at once (and the maximum): a request is
//! in flight from its arrival until just before its response's last byte.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{read_body, read_head};

/// A request the origin received.
#[derive(Debug, Clone)]
pub struct Received {
    pub seq: usize,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub arrived: Instant,
    /// When the response was all but written: taken just before its last
    /// byte is sent, so no later request can have been caused by it first
    /// (None while still being served).
    pub finished: Option<Instant>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    log: Mutex<Vec<Received>>,
    defaults: Mutex<HashMap<String, String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    stop: AtomicBool,
}

/// The origin server; stops accepting when dropped.
pub struct Origin {
    port: u16,
    inner: Arc<Inner>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("origin bind");
        let port = listener.local_addr().expect("origin addr").port();
        let inner = Arc::new(Inner::default());
        accept(listener, inner.clone(), |s| &s.stop, serve);
        Origin { port, inner }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`, for the "to" side of a remap rule.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Sets a default for one of the control headers (e.g. `X-Origin-CC`).
    pub fn set_default(&self, header: &str, value: &str) {
        lock(&self.inner.defaults).insert(header.to_ascii_lowercase(), value.to_owned());
    }

    /// Number of requests received so far.
    pub fn count(&self) -> usize {
        lock(&self.inner.log).len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        lock(&self.inner.log).clone()
    }

    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Most requests served at once since start (or the last reset).
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn reset_max_in_flight(&self) {
        self.inner
            .max_in_flight
            .store(self.in_flight(), Ordering::SeqCst);
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Serves each connection `listener` accepts on a thread of its own with
/// `serve`, until `stop(state)` is set (then one more connection, made by
/// the origin's `Drop`, wakes the loop to see it). Shared by the test
/// origins.
pub(crate) fn accept<S: Send + Sync + 'static>(
    listener: TcpListener,
    state: Arc<S>,
    stop: fn(&S) -> &AtomicBool,
    serve: fn(TcpStream, &S) -> io::Result<()>,
) {
    thread::spawn(move || {
        for conn in listener.incoming() {
            if stop(&state).load(Ordering::Relaxed) {
                break;
            }
            if let Ok(conn) = conn {
                let s = state.clone();
                thread::spawn(move || {
                    let _ = serve(conn, &s);
                });
            }
        }
    });
}

/// A mutex's guard, poisoned or not (a test thread that panicked holding
/// it must not fail every later request). Shared by the test origins.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn serve(conn: TcpStream, s: &Inner) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let (line, headers) = match read_head(&mut reader) {
            Ok(h) => h,
            Err(_) => return Ok(()), // peer closed the keep-alive connection
        };
        read_body(&mut reader, &headers, false)?;
        let arrived = Instant::now();
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let control = |name: &str| -> Option<String> {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .or_else(|| lock(&s.defaults).get(&name.to_ascii_lowercase()).cloned())
        };
        let seq = {
            let mut log = lock(&s.log);
            let seq = log.len();
            log.push(Received {
                seq,
                path,
                headers: headers.clone(),
                arrived,
                finished: None,
            });
            seq
        };
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);

        let delay: u64 = control("X-Origin-Delay")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let ranged = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("Range"));
        let status: u16 = ranged
            .then(|| control("X-Origin-Range-Status"))
            .flatten()
            .or_else(|| control("X-Origin-Status"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(200);
        let status = match lock(&s.log).get(seq) {
            Some(r) if r.path.starts_with("/login") => {
                if r.header("X-Password") == Some("good") {
                    200
                } else {
                    401
                }
            }
            _ => status,
        };
        let cc = control("X-Origin-CC").unwrap_or_else(|| "no-store".into());
        let size: usize = control("X-Origin-Body")
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        if delay > 0 {
            thread::sleep(Duration::from_millis(delay));
        }
        let body: Vec<u8> = if size == 3 {
            b"ok\n".to_vec()
        } else {
            vec![b'x'; size]
        };
        let mut response = format!(
            "HTTP/1.1 {status} Origin\r\nDate: {}\r\nCache-Control: {cc}\r\nContent-Length: {}\r\n\
             X-Origin-Seq: {seq}\r\nConnection: keep-alive\r\n\r\n",
            httpdate::fmt_http_date(SystemTime::now()),
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(&body);
        // The request stops counting just before the last byte leaves: the
        // proxy cannot finish the transaction (and a plugin cannot free its
        // slot) without that byte, so any request arriving after this point
        // was admitted after the release. Counting down after the write
        // instead races with that next request (a false overlap).
        let (most, last) = response.split_at(response.len() - 1);
        let first = writer.write_all(most);
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some(r) = lock(&s.log).get_mut(seq) {
            r.finished = Some(Instant::now());
        }
        first.and_then(|_| writer.write_all(last))?;
    }
}
