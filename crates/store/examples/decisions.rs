//! Decisions per second of one store client's I/O thread against a local
//! redis-server (started here, loopback): keeps `capacity` decisions
//! outstanding, takes completions back as they come, for a few seconds.
//!
//!     cargo run --release -p store --example decisions [SECONDS]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ats_tests::redis::Redis as Server;
use store::redis::{key_base, Addr, Decide, LeaseIds, Op, Redis, Reply};
use store::{Client, Config, Outcome};

fn main() -> Result<(), String> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let server = Server::start()?;
    let addr = Addr {
        host: "127.0.0.1".into(),
        port: server.port(),
        db: 0,
    };
    let backend = Redis::new(&addr)?;
    let c: Client<Redis, ()> =
        Client::start("bench", backend, Config::default()).map_err(|e| e.to_string())?;
    let ids = LeaseIds::default();
    // 1,000 keys, rate and lease each (the full script path).
    let bases: Vec<String> = (0..1000)
        .map(|i| key_base("bench", Some(format!("k{i}").as_bytes())))
        .collect();
    let cap = 4096;
    let (mut sent, mut done, mut admitted, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    while Instant::now() < end {
        while c.outstanding() < cap {
            let base = &bases[(sent % 1000) as usize];
            let op = Op::Decide(Decide {
                base: base.clone(),
                interval_us: 1000,
                burst: 100,
                limit: 50,
                member: ids.next(),
                lease_ttl_ms: 1000,
            });
            if c.submit(op, (), Duration::from_secs(1)).is_err() {
                break;
            }
            sent += 1;
        }
        while let Some(d) = c.try_complete() {
            done += 1;
            match d.outcome {
                Outcome::Reply(Reply::Admitted { .. }) => admitted += 1,
                Outcome::Reply(_) => {}
                _ => failed += 1,
            }
        }
        std::thread::yield_now();
    }
    let t = start.elapsed().as_secs_f64();
    let rt = c.stats().round_trips.load(Ordering::Relaxed);
    println!(
        "{done} decisions in {t:.1} s: {:.0}/s, {:.0} per round trip, {admitted} admitted, {failed} failed",
        done as f64 / t,
        done as f64 / rt.max(1) as f64
    );
    Ok(())
}
