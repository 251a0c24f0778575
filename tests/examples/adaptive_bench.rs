//! `--limit=auto` and `max:auto` against fixed limits (issue 34's
//! benchmark): a real traffic_server in front of an origin of capacity C
//! (processor sharing beyond it, `ats_tests::capacity_origin`), with
//! closed-loop clients (coming back 10 ms after a refusal), for no limiter,
//! rate_limit.so (queueing) fixed at C, at 4C and auto, and throttle.so
//! (answering 503 when full) the same. Prints one Markdown table row per
//! configuration: the origin's latency p50/p99, its answers per second,
//! and the share of clients' requests refused (429 or 503) or failed.
//!
//! ```text
//! cargo run --release -p ats-tests --example adaptive_bench [SECONDS]
//! ```
//!
//! SECONDS (default 20) of measurement after 10 s of warm-up (what auto
//! takes to learn), per configuration. Env: `CAPACITY` (8), `BASE_MS`
//! (50), `CLIENTS` (40), `ONLY` (run only the configurations whose name
//! contains it).

use std::thread;
use std::time::{Duration, Instant};

use ats_tests::capacity_origin::CapacityOrigin;
use ats_tests::closed_loop::ClosedLoop;
use ats_tests::TrafficServer;

const BACKOFF: Duration = Duration::from_millis(10);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One configuration: the plugin and its parameters (`None`: no plugin).
type Config = Option<(&'static str, String)>;

fn run(origin: &CapacityOrigin, config: &Config, clients: usize, secs: u64) -> Row {
    let map = match config {
        None => format!("map http://a.test/ {}\n", origin.url()),
        Some((plugin, p)) => {
            let pp: String = p.split(' ').map(|p| format!(" @pparam={p}")).collect();
            format!(
                "map http://a.test/ {} @plugin={}{pp}\n",
                origin.url(),
                ats_tests::plugin(plugin)
            )
        }
    };
    let ts = TrafficServer::builder().remap(map).start().expect("start");
    // A refused client comes back 10 ms later (throttle.so answers 503 at
    // once; rate_limit.so queues).
    let load = ClosedLoop::start(ts.port(), "a.test", clients, BACKOFF, false);
    thread::sleep(Duration::from_secs(10));
    let (t0, answered0, lat0) = (
        Instant::now(),
        origin.answered(),
        origin.latencies_us().len(),
    );
    load.count(true);
    thread::sleep(Duration::from_secs(secs));
    load.count(false);
    let elapsed = t0.elapsed().as_secs_f64();
    let answered = origin.answered() - answered0;
    let mut lat: Vec<u64> = origin.latencies_us()[lat0..].to_vec();
    let n = load.stop();
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
        refused: n.refused as f64 / n.total().max(1) as f64,
        failed: n.other as f64 / n.total().max(1) as f64,
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
    let rate_limit = |p: String| Some(("rate_limit", p));
    let throttle = |max: String| Some(("throttle", format!("max:{max}")));
    let configs: [(&str, Config); 7] = [
        ("no limiter", None),
        ("fixed at C", rate_limit(format!("--limit={c} {queue}"))),
        (
            "fixed at 4C",
            rate_limit(format!("--limit={} {queue}", 4 * c)),
        ),
        ("auto", rate_limit(format!("--limit=auto {queue}"))),
        ("throttle.so max:C", throttle(c.to_string())),
        ("throttle.so max:4C", throttle((4 * c).to_string())),
        ("throttle.so max:auto", throttle("auto".to_owned())),
    ];
    println!(
        "Origin of capacity C = {c} at {} ms ({} answers/s at most), {clients} closed-loop \
         clients, {secs} s measured after 10 s:\n",
        base.as_millis(),
        c as f64 / base.as_secs_f64()
    );
    println!("| limiter | origin p50 | origin p99 | origin answers/s | 429/503 | failed |");
    println!("|---|--:|--:|--:|--:|--:|");
    let only = std::env::var("ONLY").unwrap_or_default();
    for (name, params) in configs.into_iter().filter(|(n, _)| n.contains(&only)) {
        // A fresh origin each: its samples are this configuration's.
        let origin = CapacityOrigin::start(c as usize, base);
        let r = run(&origin, &params, clients, secs);
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
