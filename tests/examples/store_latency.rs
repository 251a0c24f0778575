//! Added latency of the stores: one traffic_server with rate_limit.so's
//! limits decided locally and in Redis (`--store`), and ip_throttle.so's
//! per-IP step on local state, on memcached and on Redis (`--threshold=0`,
//! so every request runs the step and passes); sequential requests on a
//! keep-alive connection, p50/p99 of each. Also the same with 16 clients
//! at once. Beside them, the reference: a raw `EVALSHA` of the decision
//! script (then the `ZREM` of its lease) on a plain connection to the same
//! Redis, timed from write to reply.
//!
//!     cargo run --release -p ats-tests --example store_latency [REQUESTS]
//!
//! Environment: `HOSTS=none,exact` only those rules; `CLIENTS=16` only that
//! many clients; `TAIL=1` the requests over 5 ms by duration; `NO_METRICS=1`
//! skips the plugin's histogram (and its 12 s wait).

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
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

/// `n` sequential requests for `http://host/c<who>`: a path of each
/// client's own, as concurrent misses of one URL meet Traffic Server's
/// read-while-writer wait (50 ms, `ats_tests::closed_loop`), whatever the
/// plugin: with one path, 16 clients through no plugin had 3.8 % of
/// requests over 5 ms (almost all over 50 ms); with a path each, 0.6 %.
fn run(port: u16, host: &'static str, n: usize, who: usize) -> Vec<Duration> {
    let mut c = Conn::open(port).expect("connect");
    let path = format!("/c{who}");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = c.get(host, &path, &[]).expect("response");
        assert_eq!(r.status, 200, "{host}");
        out.push(t.elapsed());
    }
    out
}

/// One RESP command as an array of bulk strings.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out += &format!("${}\r\n{a}\r\n", a.len());
    }
    out.into_bytes()
}

/// Reads one reply of `lines` CRLF-terminated lines.
fn read_lines(s: &mut TcpStream, buf: &mut Vec<u8>, lines: usize) -> String {
    buf.clear();
    let mut chunk = [0u8; 4096];
    while buf.windows(2).filter(|w| w == b"\r\n").count() < lines {
        // An error reply is one line: fail on it rather than wait for more.
        assert!(
            !(buf.starts_with(b"-") && buf.windows(2).any(|w| w == b"\r\n")),
            "redis: {}",
            String::from_utf8_lossy(buf)
        );
        let n = s.read(&mut chunk).expect("redis read");
        assert!(n > 0, "redis closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(buf).into_owned()
}

/// The reference: the plugin's own decision (`EVALSHA` of its script, a
/// lease taken) and the `ZREM` that gives the lease back, each a raw round
/// trip on one connection to the same Redis, timed from write to reply;
/// one sample per pair (the `EVALSHA`'s round trip).
fn raw_evalsha(port: u16, n: usize, who: usize) -> Vec<Duration> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("redis");
    s.set_nodelay(true).expect("nodelay");
    let mut buf = Vec::new();
    s.write_all(&resp(&["SCRIPT", "LOAD", store::redis::DECIDE]))
        .expect("load");
    let sha = read_lines(&mut s, &mut buf, 2);
    let sha = sha.lines().nth(1).expect("sha").to_owned();
    let (gcra, leases, block) = (
        format!("raw{who}:gcra"),
        format!("raw{who}:leases"),
        format!("raw{who}:block"),
    );
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let member = format!("m{i}");
        let cmd = resp(&[
            "EVALSHA", &sha, "3", &gcra, &leases, &block, "1", "1000000", "100000", &member,
            "30000", "0", "0",
        ]);
        let t = Instant::now();
        s.write_all(&cmd).expect("evalsha");
        let r = read_lines(&mut s, &mut buf, 5);
        out.push(t.elapsed());
        assert!(r.starts_with("*4\r\n:1\r\n"), "{r}");
        s.write_all(&resp(&["ZREM", &leases, &member]))
            .expect("zrem");
        read_lines(&mut s, &mut buf, 1);
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
    let all_hosts = [
        "none.test",
        "local.test",
        "exact.test",
        "ipt-local.test",
        "ipt-mc.test",
        "ipt-redis.test",
    ];
    // HOSTS=none,exact: only those rules (and the raw round trip).
    let only = std::env::var("HOSTS").unwrap_or_default();
    let hosts: Vec<&'static str> = all_hosts
        .into_iter()
        .filter(|h| only.is_empty() || only.split(',').any(|o| h.split('.').next() == Some(o)))
        .collect();
    for &host in &hosts {
        run(ts.port(), host, 200, 0); // warm up
    }
    raw_evalsha(redis.port(), 200, 99); // warm up
    println!("| rule | clients | p50 µs | p90 µs | p99 µs | over 5 ms |");
    println!("|---|---|---|---|---|---|");
    // CLIENTS=16: only that many clients at once.
    let counts: Vec<usize> = match std::env::var("CLIENTS").ok().and_then(|c| c.parse().ok()) {
        Some(c) => vec![c],
        None => vec![1, 16],
    };
    for clients in counts {
        let per = n / clients;
        let rport = redis.port();
        let hs: Vec<_> = (0..clients)
            .map(|c| std::thread::spawn(move || raw_evalsha(rport, per, c)))
            .collect();
        let mut all: Vec<Duration> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let slow = all.iter().filter(|d| d.as_millis() >= 5).count();
        let (p50, p90, p99) = (pct(&mut all, 0.5), pct(&mut all, 0.9), pct(&mut all, 0.99));
        println!(
            "| raw EVALSHA | {clients} | {p50:.0} | {p90:.0} | {p99:.0} | {:.2}% |",
            100.0 * slow as f64 / all.len() as f64
        );
        for &host in &hosts {
            let port = ts.port();
            let per = n / clients;
            let hs: Vec<_> = (0..clients)
                .map(|c| std::thread::spawn(move || run(port, host, per, c)))
                .collect();
            let mut all: Vec<Duration> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
            let slow = all.iter().filter(|d| d.as_millis() >= 5).count();
            let (p50, p90, p99) = (pct(&mut all, 0.5), pct(&mut all, 0.9), pct(&mut all, 0.99));
            println!(
                "| {host} | {clients} | {p50:.0} | {p90:.0} | {p99:.0} | {:.2}% |",
                100.0 * slow as f64 / all.len() as f64
            );
            if std::env::var_os("TAIL").is_some() {
                let b = [5u128, 9, 13, 20, 50, 1000];
                let c: Vec<usize> = b
                    .windows(2)
                    .map(|w| {
                        all.iter()
                            .filter(|d| d.as_millis() >= w[0] && d.as_millis() < w[1])
                            .count()
                    })
                    .collect();
                println!("  tail ms [5,9) [9,13) [13,20) [20,50) [50,..): {c:?}");
            }
        }
    }
    // The plugin's own view: submit to completion taken (metrics lag ~10 s).
    if std::env::var_os("NO_METRICS").is_some() {
        return;
    }
    std::thread::sleep(Duration::from_secs(12));
    for le in ["1ms", "2ms", "5ms", "10ms", "20ms", "50ms", "100ms", "inf"] {
        let name = format!("plugin.rate_limiter.remap.exact.store_latency.le_{le}");
        println!("{name} {:?}", ts.metric(&name));
    }
}
