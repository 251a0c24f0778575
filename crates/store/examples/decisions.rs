//! Decisions per second of one store client's I/O thread against a local
//! redis-server (started here, loopback), or a three-master Redis Cluster
//! with `--cluster`: keeps `capacity` decisions outstanding, takes
//! completions back as they come, for a few seconds.
//!
//!     cargo run --release -p store --example decisions [SECONDS] [--cluster]

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ats_tests::redis::Redis as Server;
use ats_tests::redis_cluster::RedisCluster;
use store::redis::{key_base, Addr, Decide, LeaseIds, Op, Redis, Reply, Target};
use store::{Answer, Client, Config};

fn main() -> Result<(), String> {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let cluster = std::env::args().any(|a| a == "--cluster");
    // Kept until the end (killed on drop).
    let (_server, target) = if cluster {
        let c = RedisCluster::start()?;
        let t = store::url::redis(&c.url()).map_err(|e| format!("{e:?}"))?;
        (Err(c), t)
    } else {
        let s = Server::start()?;
        let addr = Addr {
            host: "127.0.0.1".into(),
            port: s.port(),
            db: 0,
        };
        (Ok(s), Target::Node(addr))
    };
    println!("store: {}", target.url());
    let backend = Redis::new(target)?;
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
                check_only: false,
                block_us: 0,
            });
            if c.submit(op, (), Duration::from_secs(1)).is_err() {
                break;
            }
            sent += 1;
        }
        while let Some(d) = c.try_complete() {
            done += 1;
            match d.answer {
                Answer::Reply(Reply::Admitted { .. }) => admitted += 1,
                Answer::Reply(_) => {}
                _ => failed += 1,
            }
        }
        std::thread::yield_now();
    }
    let t = start.elapsed().as_secs_f64();
    // One at a time: the round trip a lone request sees (thread wake-ups
    // and Redis included, ATS not).
    while c.outstanding() > 0 {
        if c.try_complete().is_none() {
            std::thread::yield_now();
        }
    }
    let mut lone = Vec::new();
    for i in 0..2000 {
        let op = Op::Decide(Decide {
            base: bases[i % 1000].clone(),
            interval_us: 1000,
            burst: 100,
            limit: 50,
            member: ids.next(),
            lease_ttl_ms: 1000,
            check_only: false,
            block_us: 0,
        });
        let s = Instant::now();
        c.submit(op, (), Duration::from_secs(1))
            .map_err(|_| "full")?;
        loop {
            if c.try_complete().is_some() {
                break;
            }
            std::hint::spin_loop();
        }
        lone.push(s.elapsed());
    }
    lone.sort();
    let us = |p: f64| lone[((lone.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "one at a time: p50 {:.0} µs, p90 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        us(0.5),
        us(0.9),
        us(0.99),
        us(1.0)
    );
    let rt = c.stats().round_trips.load(Ordering::Relaxed);
    println!(
        "{done} decisions in {t:.1} s: {:.0}/s, {:.0} per round trip, {admitted} admitted, {failed} failed",
        done as f64 / t,
        done as f64 / rt.max(1) as f64
    );
    Ok(())
}
