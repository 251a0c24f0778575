//! Added latency of the stores: one traffic_server with rate_limit.so's
//! limits decided locally and in Redis (`--store`), and ip_throttle.so's
//! per-IP step on local state, on memcached and on Redis (`--threshold=0`,
//! so every request runs the step and passes); sequential requests on a
//! keep-alive connection, p50/p99 of each. Also the same with 16 clients
//! at once.
//!
//!     cargo run --release -p ats-tests --example store_latency [REQUESTS]

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::memcached::Memcached;
use ats_tests::redis::Redis;
use ats_tests::{Origin, TrafficServer};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

fn run(port: u16, host: &'static str, n: usize) -> Vec<Duration> {
    let mut c = Conn::open(port).expect("connect");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = c.get(host, "/", &[]).expect("response");
        assert_eq!(r.status, 200, "{host}");
        out.push(t.elapsed());
    }
    out
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let redis = Redis::start().expect("redis");
    let memcached = Memcached::start().expect("memcached");
    let origin = Origin::start();
    let limits = "--rate=1000000 --limit=100000";
    let mut remap = String::new();
    remap += &ats_tests::rule(
        "rate_limit",
        "local.test",
        &origin,
        &format!("{limits} --tag=local"),
    );
    remap += &ats_tests::rule(
        "rate_limit",
        "exact.test",
        &origin,
        &format!(
            "{limits} --tag=exact --store={} --store-failure=closed",
            redis.url()
        ),
    );
    // Every request runs ip_throttle's step and passes (probation ends at once).
    let ipt = "--threshold=0 --initial-delay=1 --instance=bench";
    remap += &ats_tests::rule("ip_throttle", "ipt-local.test", &origin, ipt);
    for (host, store) in [
        ("ipt-mc.test", memcached.url()),
        ("ipt-redis.test", redis.url()),
    ] {
        remap += &ats_tests::rule(
            "ip_throttle",
            host,
            &origin,
            &format!("{ipt} --store={store} --store-timeout=50"),
        );
    }
    remap += &format!("map http://none.test/ {}\n", origin.url());
    let mut b = TrafficServer::builder().remap(remap).with_manager();
    if let Ok(ms) = std::env::var("POLL_TIMEOUT_MS") {
        b = b.record("proxy.config.net.poll_timeout", &format!("INT {ms}"));
    }
    let ts = b.start().expect("traffic_server");
    let hosts = [
        "none.test",
        "local.test",
        "exact.test",
        "ipt-local.test",
        "ipt-mc.test",
        "ipt-redis.test",
    ];
    for host in hosts {
        run(ts.port(), host, 200); // warm up
    }
    println!("| rule | clients | p50 µs | p90 µs | p99 µs | over 5 ms |");
    println!("|---|---|---|---|---|---|");
    for clients in [1usize, 16] {
        for host in hosts {
            let port = ts.port();
            let per = n / clients;
            let hs: Vec<_> = (0..clients)
                .map(|_| std::thread::spawn(move || run(port, host, per)))
                .collect();
            let mut all: Vec<Duration> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
            let slow = all.iter().filter(|d| d.as_millis() >= 5).count();
            let (p50, p90, p99) = (pct(&mut all, 0.5), pct(&mut all, 0.9), pct(&mut all, 0.99));
            println!(
                "| {host} | {clients} | {p50:.0} | {p90:.0} | {p99:.0} | {:.2}% |",
                100.0 * slow as f64 / all.len() as f64
            );
        }
    }
    // The plugin's own view: submit to completion taken (metrics lag ~10 s).
    std::thread::sleep(Duration::from_secs(12));
    for le in ["1ms", "2ms", "5ms", "10ms", "20ms", "50ms", "100ms", "inf"] {
        let name = format!("plugin.rate_limiter.remap.exact.store_latency.le_{le}");
        println!("{name} {:?}", ts.metric(&name));
    }
}
