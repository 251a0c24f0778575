//! Closed-loop clients for the learned-limit tests and benchmark (issue
//! 34): each thread sends one request after another on a keep-alive
//! connection, waiting `backoff` after a refusal (a client that comes
//! back), and counts the answers while counting is on.
//!
//! Each client asks for a path of its own (`/c<N>`). Concurrent cache
//! misses of one URL would otherwise meet Traffic Server's read-while-writer
//! wait (`proxy.config.cache.read_while_writer_retry.delay`, 50 ms) even
//! for a `no-store` answer: measured here, 8 clients of one URL through a
//! bare 9.2 took 104 ms a request from a 51 ms origin, and a limit at the
//! origin's capacity left it half idle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::client::Conn;

/// Answers counted: 200s, refusals (429 or 503), anything else (another
/// status, a connection or read error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub ok: u64,
    pub refused: u64,
    pub other: u64,
}

impl Counts {
    fn add(self, o: Counts) -> Counts {
        Counts {
            ok: self.ok + o.ok,
            refused: self.refused + o.refused,
            other: self.other + o.other,
        }
    }

    pub fn total(&self) -> u64 {
        self.ok + self.refused + self.other
    }
}

/// The running clients; [`ClosedLoop::stop`] joins them.
pub struct ClosedLoop {
    stop: Arc<AtomicBool>,
    counting: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<Counts>>,
}

impl ClosedLoop {
    /// `clients` threads requesting `http://host/c<N>` through `port`, counting
    /// from the start if `counting`.
    pub fn start(port: u16, host: &str, clients: usize, backoff: Duration, counting: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let counting = Arc::new(AtomicBool::new(counting));
        let threads = (0..clients)
            .map(|i| {
                let (stop, counting, host) = (stop.clone(), counting.clone(), host.to_owned());
                let path = format!("/c{i}");
                thread::spawn(move || client(port, &host, &path, backoff, &stop, &counting))
            })
            .collect();
        ClosedLoop {
            stop,
            counting,
            threads,
        }
    }

    /// Counts the answers from now on (`true`) or no more (`false`).
    pub fn count(&self, on: bool) {
        self.counting.store(on, Ordering::Relaxed);
    }

    /// Stops the clients (each after its request in flight) and sums
    /// their counts.
    pub fn stop(self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().expect("client thread"))
            .fold(Counts::default(), Counts::add)
    }
}

fn client(
    port: u16,
    host: &str,
    path: &str,
    backoff: Duration,
    stop: &AtomicBool,
    counting: &AtomicBool,
) -> Counts {
    let mut counts = Counts::default();
    let mut conn: Option<Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::open(port) {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    counts.other += u64::from(counting.load(Ordering::Relaxed));
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        let status = match c.get(host, path, &[]) {
            Ok(r) => {
                // ATS closes the connection after its error pages (a 503).
                if r.header("Connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"))
                {
                    conn = None;
                }
                r.status
            }
            Err(_) => {
                conn = None;
                0
            }
        };
        let counted = counting.load(Ordering::Relaxed);
        match status {
            200 => counts.ok += u64::from(counted),
            429 | 503 => {
                counts.refused += u64::from(counted);
                thread::sleep(backoff);
            }
            _ => counts.other += u64::from(counted),
        }
    }
    counts
}
