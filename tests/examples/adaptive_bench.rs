//! `--limit=auto` against fixed limits (issue 34's benchmark): a real
//! traffic_server in front of an origin of capacity C (processor sharing
//! beyond it, `ats_tests::capacity_origin`), with closed-loop clients, for
//! no limiter, a fixed limit at C, one at 4C, and auto. Prints one
//! Markdown table row per configuration: the origin's latency p50/p99, its
//! answers per second, and the share of clients' requests refused (429) or
//! failed.
//!
//! ```text
//! cargo run --release -p ats-tests --example adaptive_bench [SECONDS]
//! ```
//!
//! SECONDS (default 20) of measurement after 10 s of warm-up (what auto
//! takes to learn), per configuration. Env: `CAPACITY` (8), `BASE_MS`
//! (50), `CLIENTS` (40).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::capacity_origin::CapacityOrigin;
use ats_tests::client::Conn;
use ats_tests::TrafficServer;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Clients' answers: (ok, refused 429, other).
type Counts = (u64, u64, u64);

fn run(origin: &CapacityOrigin, params: Option<&str>, clients: usize, secs: u64) -> Row {
    let map = match params {
        None => format!("map http://a.test/ {}\n", origin.url()),
        Some(p) => {
            let pp: String = p.split(' ').map(|p| format!(" @pparam={p}")).collect();
            format!(
                "map http://a.test/ {} @plugin={}{pp}\n",
                origin.url(),
                ats_tests::plugin("rate_limit")
            )
        }
    };
    let ts = TrafficServer::builder().remap(map).start().expect("start");
    let port = ts.port();
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (stop, measuring) = (stop.clone(), measuring.clone());
            thread::spawn(move || -> Counts {
                let mut counts = (0, 0, 0);
                let mut conn: Option<Conn> = None;
                while !stop.load(Ordering::Relaxed) {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match Conn::open(port) {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                        },
                    };
                    let status = match c.get("a.test", "/", &[]) {
                        Ok(r) => r.status,
                        Err(_) => {
                            conn = None;
                            0
                        }
                    };
                    if measuring.load(Ordering::Relaxed) {
                        match status {
                            200 => counts.0 += 1,
                            429 => counts.1 += 1,
                            _ => counts.2 += 1,
                        }
                    }
                }
                counts
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(10));
    let (t0, answered0, lat0) = (
        Instant::now(),
        origin.answered(),
        origin.latencies_us().len(),
    );
    measuring.store(true, Ordering::Relaxed);
    thread::sleep(Duration::from_secs(secs));
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let answered = origin.answered() - answered0;
    let mut lat: Vec<u64> = origin.latencies_us()[lat0..].to_vec();
    stop.store(true, Ordering::Relaxed);
    let (ok, refused, other) = threads
        .into_iter()
        .map(|t| t.join().unwrap_or_default())
        .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    Row {
        p50_ms: pct(0.5) as f64 / 1000.0,
        p99_ms: pct(0.99) as f64 / 1000.0,
        per_s: answered as f64 / elapsed,
        refused: refused as f64 / (ok + refused + other).max(1) as f64,
        failed: other as f64 / (ok + refused + other).max(1) as f64,
    }
}

struct Row {
    p50_ms: f64,
    p99_ms: f64,
    per_s: f64,
    refused: f64,
    failed: f64,
}

fn main() {
    let secs = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let c = env("CAPACITY", 8);
    let base = Duration::from_millis(env("BASE_MS", 50));
    let clients = env("CLIENTS", 40) as usize;
    let queue = "--queue=10000 --maxage=30000";
    let configs: [(&str, Option<String>); 4] = [
        ("no limiter", None),
        ("fixed at C", Some(format!("--limit={c} {queue}"))),
        ("fixed at 4C", Some(format!("--limit={} {queue}", 4 * c))),
        ("auto", Some(format!("--limit=auto {queue}"))),
    ];
    println!(
        "Origin of capacity C = {c} at {} ms ({} answers/s at most), {clients} closed-loop \
         clients, {secs} s measured after 10 s:\n",
        base.as_millis(),
        c as f64 / base.as_secs_f64()
    );
    println!("| limiter | origin p50 | origin p99 | origin answers/s | 429 | failed |");
    println!("|---|--:|--:|--:|--:|--:|");
    for (name, params) in configs {
        // A fresh origin each: its samples are this configuration's.
        let origin = CapacityOrigin::start(c as usize, base);
        let r = run(&origin, params.as_deref(), clients, secs);
        println!(
            "| {name} | {:.0} ms | {:.0} ms | {:.0} | {:.1} % | {:.1} % |",
            r.p50_ms,
            r.p99_ms,
            r.per_s,
            r.refused * 100.0,
            r.failed * 100.0
        );
    }
}
