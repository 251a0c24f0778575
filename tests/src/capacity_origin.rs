//! A loopback origin of a given capacity, for `--limit=auto` (issue 34):
//! up to `capacity` requests in flight each takes `base` to answer; beyond,
//! they share its capacity as a processor-sharing server does (each makes
//! `capacity / in_flight` of a request's progress per unit of time), so
//! latency grows with the load and throughput stays at `capacity / base`.
//!
//! It samples how many requests it holds at each arrival, for the median
//! the tests and the benchmark check, and counts answers. A path under
//! `/cacheable` is answered at once, outside the model, stale from the
//! start (`max-age=0`, dated): what throttle.so may serve stale when full.

use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{read_body, read_head};
use crate::origin::lock;

/// Progress is accounted every this long (a request's latency is within one
/// step of the model's).
const STEP: Duration = Duration::from_millis(1);

struct Inner {
    capacity: usize,
    base: Duration,
    in_flight: AtomicUsize,
    /// In flight at each arrival (itself included), in arrival order.
    samples: Mutex<Vec<(Instant, usize)>>,
    answered: AtomicU64,
    latency_us: Mutex<Vec<u64>>,
    stop: AtomicBool,
}

/// The origin; stops accepting when dropped.
pub struct CapacityOrigin {
    port: u16,
    inner: Arc<Inner>,
}

impl CapacityOrigin {
    pub fn start(capacity: usize, base: Duration) -> CapacityOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("origin bind");
        let port = listener.local_addr().expect("origin addr").port();
        let inner = Arc::new(Inner {
            capacity: capacity.max(1),
            base,
            in_flight: AtomicUsize::new(0),
            samples: Mutex::new(Vec::new()),
            answered: AtomicU64::new(0),
            latency_us: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        crate::origin::accept(listener, inner.clone(), |s| &s.stop, serve);
        CapacityOrigin { port, inner }
    }

    /// `http://127.0.0.1:<port>`, for the "to" side of a remap rule.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.inner.answered.load(Ordering::Relaxed)
    }

    /// The in-flight counts seen at arrivals since `since`, sorted.
    pub fn in_flight_since(&self, since: Instant) -> Vec<usize> {
        let mut v: Vec<usize> = lock(&self.inner.samples)
            .iter()
            .filter(|(at, _)| *at >= since)
            .map(|(_, n)| *n)
            .collect();
        v.sort_unstable();
        v
    }

    /// Each answer's time at the origin, µs, in answer order.
    pub fn latencies_us(&self) -> Vec<u64> {
        lock(&self.inner.latency_us).clone()
    }
}

impl Drop for CapacityOrigin {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(conn: TcpStream, s: &Inner) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let Ok((line, headers)) = read_head(&mut reader) else {
            return Ok(()); // the proxy closed the connection
        };
        read_body(&mut reader, &headers, false)?;
        if line
            .split(' ')
            .nth(1)
            .is_some_and(|p| p.starts_with("/cacheable"))
        {
            write!(
                writer,
                "HTTP/1.1 200 OK\r\nDate: {}\r\nCache-Control: max-age=0\r\n\
                 Content-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n",
                httpdate::fmt_http_date(SystemTime::now())
            )?;
            continue;
        }
        let start = Instant::now();
        let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&s.samples).push((start, n));
        // Processor sharing: each step, progress of min(1, C / in flight).
        let need = s.base.as_secs_f64();
        let mut done = 0.0;
        let mut last = start;
        while done < need {
            thread::sleep(STEP);
            let now = Instant::now();
            let load = s.in_flight.load(Ordering::SeqCst).max(1);
            let share = (s.capacity as f64 / load as f64).min(1.0);
            done += now.duration_since(last).as_secs_f64() * share;
            last = now;
        }
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        let took = start.elapsed();
        lock(&s.latency_us).push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        s.answered.fetch_add(1, Ordering::Relaxed);
        writer.write_all(
            b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 3\r\n\
              Connection: keep-alive\r\n\r\nok\n",
        )?;
    }
}
