//! A small HTTP/1.1 client for tests: exact control over connections
//! (keep-alive, aborts) and timing, which general-purpose clients hide.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// A response as received.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// The status line's reason phrase.
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the request was sent.
    pub sent_at: Instant,
    /// Time from sending to the complete response.
    pub elapsed: Duration,
}

impl Response {
    /// First header value of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// A keep-alive client connection to the proxy.
pub struct Conn {
    reader: BufReader<TcpStream>,
    port: u16,
}

impl Conn {
    pub fn open(port: u16) -> io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        Conn::wrap(s, port)
    }

    /// A connection to the proxy's IPv6 loopback listener, from ::1 (see
    /// [`TsBuilder::ipv6`](crate::TsBuilder::ipv6)).
    pub fn open_ipv6(port: u16) -> io::Result<Conn> {
        let s = TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port))?;
        Conn::wrap(s, port)
    }

    /// A connection from a chosen loopback source address (127.0.0.2,
    /// 127.0.0.3, …), so one test can act as several client IPs.
    pub fn open_from(port: u16, from: std::net::Ipv4Addr) -> io::Result<Conn> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.bind(&std::net::SocketAddr::from((from, 0)).into())?;
        sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
        Conn::wrap(sock.into(), port)
    }

    /// A connection from `from` that starts with a PROXY protocol v1 header
    /// naming `client` as the source (to a port with
    /// [`TsBuilder::proxy_protocol`](crate::TsBuilder::proxy_protocol)).
    pub fn open_proxied(
        port: u16,
        from: std::net::Ipv4Addr,
        client: std::net::Ipv4Addr,
    ) -> io::Result<Conn> {
        let mut c = Conn::open_from(port, from)?;
        let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 {port}\r\n");
        c.reader.get_mut().write_all(header.as_bytes())?;
        Ok(c)
    }

    fn wrap(s: TcpStream, port: u16) -> io::Result<Conn> {
        s.set_read_timeout(Some(TIMEOUT))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(s),
            port,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends a GET and reads the response; the connection stays open.
    pub fn get(
        &mut self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> io::Result<Response> {
        let sent_at = self.send(host, path, headers, true)?;
        read_response(&mut self.reader, sent_at)
    }

    /// Sends one GET of `host` per entry of `headers` in a single write
    /// (HTTP/1.1 pipelining), then reads the responses in order: many
    /// requests at little cost in round trips and syscalls (bulk tests).
    pub fn pipeline(
        &mut self,
        host: &str,
        path: &str,
        headers: &[Vec<(String, String)>],
    ) -> io::Result<Vec<Response>> {
        let mut reqs = String::new();
        for h in headers {
            reqs.push_str(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n"));
            for (k, v) in h {
                reqs.push_str(&format!("{k}: {v}\r\n"));
            }
            reqs.push_str("\r\n");
        }
        let sent_at = Instant::now();
        self.reader.get_mut().write_all(reqs.as_bytes())?;
        (0..headers.len())
            .map(|_| read_response(&mut self.reader, sent_at))
            .collect()
    }

    /// Sends a request with `method` (and an empty body) and reads the
    /// response; the connection stays open.
    pub fn request(
        &mut self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> io::Result<Response> {
        let sent_at = self.send_method(method, host, path, headers, true)?;
        read_response(&mut self.reader, sent_at)
    }

    fn send(
        &mut self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        keep_alive: bool,
    ) -> io::Result<Instant> {
        self.send_method("GET", host, path, headers, keep_alive)
    }

    fn send_method(
        &mut self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        keep_alive: bool,
    ) -> io::Result<Instant> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        if method != "GET" && method != "HEAD" {
            req.push_str("Content-Length: 0\r\n");
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !keep_alive {
            req.push_str("Connection: close\r\n");
        }
        req.push_str("\r\n");
        let sent_at = Instant::now();
        self.reader.get_mut().write_all(req.as_bytes())?;
        Ok(sent_at)
    }

    /// Sends a GET, waits `after` without reading the response, then closes
    /// the connection: a client that gives up.
    pub fn give_up_after(
        mut self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        after: Duration,
        how: GiveUp,
    ) -> io::Result<()> {
        self.send(host, path, headers, true)?;
        thread::sleep(after);
        if how == GiveUp::Reset {
            reset_on_close(self.reader.get_ref())?;
        }
        drop(self);
        Ok(())
    }
}

/// How a client that gives up closes its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// RST, like a killed client.
    Reset,
    /// FIN, like a client that timed out and closed normally.
    Fin,
}

/// SO_LINGER with a zero timeout: close() sends RST instead of FIN.
fn reset_on_close(s: &TcpStream) -> io::Result<()> {
    socket2::SockRef::from(s).set_linger(Some(Duration::ZERO))
}

/// One GET on a fresh connection (`Connection: close`).
pub fn get(port: u16, host: &str, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    let mut c = Conn::open(port)?;
    let sent_at = c.send(host, path, headers, false)?;
    read_response(&mut c.reader, sent_at)
}

/// Runs `n` requests at once (one thread and connection each, released
/// together by a barrier); result `i` belongs to request `i`. The threads
/// are scoped: `f` may borrow (a `&TrafficServer`).
pub fn burst<F>(n: usize, f: F) -> Vec<io::Result<Response>>
where
    F: Fn(usize) -> io::Result<Response> + Sync,
{
    let (f, barrier) = (&f, &Barrier::new(n));
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("request thread panicked")))
            })
            .collect()
    })
}

/// Counts responses per status code (errors count as status 0).
pub fn status_counts(results: &[io::Result<Response>]) -> std::collections::BTreeMap<u16, usize> {
    let mut m = std::collections::BTreeMap::new();
    for r in results {
        *m.entry(r.as_ref().map(|r| r.status).unwrap_or(0))
            .or_insert(0) += 1;
    }
    m
}

pub(crate) fn read_head<R: BufRead>(r: &mut R) -> io::Result<(String, Vec<(String, String)>)> {
    let mut first = String::new();
    if r.read_line(&mut first)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in headers",
            ));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    Ok((first.trim_end().to_owned(), headers))
}

pub(crate) fn read_body<R: BufRead>(
    r: &mut R,
    headers: &[(String, String)],
    until_eof: bool,
) -> io::Result<Vec<u8>> {
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    if get("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    match get("Content-Length").and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => {
            let mut body = vec![0; n];
            r.read_exact(&mut body)?;
            Ok(body)
        }
        None if until_eof => {
            let mut body = Vec::new();
            r.read_to_end(&mut body)?;
            Ok(body)
        }
        None => Ok(Vec::new()),
    }
}

fn read_response<R: BufRead>(r: &mut R, sent_at: Instant) -> io::Result<Response> {
    let (status_line, headers) = read_head(r)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            )
        })?;
    let reason = status_line
        .splitn(3, ' ')
        .nth(2)
        .unwrap_or_default()
        .to_owned();
    let close = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("Connection") && v.eq_ignore_ascii_case("close"));
    let body = read_body(r, &headers, close)?;
    Ok(Response {
        status,
        reason,
        headers,
        body,
        sent_at,
        elapsed: sent_at.elapsed(),
    })
}

/// In the background: `n` requests to `host` at once, each held `delay_ms`
/// at the origin (`X-Origin-Delay`); the join gives their status counts.
pub fn slow_burst(
    port: u16,
    host: &'static str,
    n: usize,
    delay_ms: u64,
) -> thread::JoinHandle<std::collections::BTreeMap<u16, usize>> {
    thread::spawn(move || {
        status_counts(&burst(n, move |i| {
            get(
                port,
                host,
                &format!("/slow{i}"),
                &[("X-Origin-Delay", &delay_ms.to_string())],
            )
        }))
    })
}
