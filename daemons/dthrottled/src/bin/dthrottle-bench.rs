//! Load generator for `dthrottled` (ci/bench-dthrottled.sh runs it beside
//! `redis-benchmark`).
//!
//! - `pipelined`: C connections, each writing P tags then reading the P
//!   answers, N decisions in all; prints decisions per second (the shape of
//!   `redis-benchmark -t incr -P 16 -c C -n N`).
//! - `rtt`: one connection, one request at a time, N requests; prints
//!   round-trip percentiles.
//!
//! Usage: `dthrottle-bench pipelined|rtt ADDR [-c C] [-P P] [-n N] [--tags K]`

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    if let Err(e) = run() {
        eprintln!("dthrottle-bench: {e}");
        std::process::exit(2);
    }
}

struct Args {
    mode: String,
    addr: String,
    conns: usize,
    pipeline: usize,
    n: usize,
    tags: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        mode: String::new(),
        addr: String::new(),
        conns: 50,
        pipeline: 16,
        n: 1_000_000,
        tags: 1,
    };
    let mut it = std::env::args().skip(1);
    let mut pos = Vec::new();
    while let Some(x) = it.next() {
        let mut val = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .ok_or(format!("{name} needs a number > 0"))
        };
        match x.as_str() {
            "-c" => a.conns = val("-c")?,
            "-P" => a.pipeline = val("-P")?,
            "-n" => a.n = val("-n")?,
            "--tags" => a.tags = val("--tags")?,
            _ => pos.push(x),
        }
    }
    match pos.as_slice() {
        [m, addr] if m == "pipelined" || m == "rtt" => {
            a.mode = m.clone();
            a.addr = addr.clone();
            Ok(a)
        }
        _ => {
            Err("usage: dthrottle-bench pipelined|rtt ADDR [-c C] [-P P] [-n N] [--tags K]".into())
        }
    }
}

fn connect(addr: &str) -> Result<TcpStream, String> {
    let s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

fn run() -> Result<(), String> {
    let a = parse()?;
    if a.mode == "rtt" {
        return rtt(&a);
    }
    let per_conn = a.n.div_ceil(a.conns * a.pipeline);
    let start = Instant::now();
    let handles: Vec<_> = (0..a.conns)
        .map(|c| {
            let (addr, p, tags) = (a.addr.clone(), a.pipeline, a.tags);
            std::thread::spawn(move || -> Result<u64, String> {
                let mut s = connect(&addr)?;
                let mut batch = Vec::new();
                for i in 0..p {
                    batch.extend_from_slice(format!("tag-{}\n", (c * p + i) % tags).as_bytes());
                }
                let mut answers = vec![0u8; 3 * p];
                let mut ok = 0;
                for _ in 0..per_conn {
                    s.write_all(&batch).map_err(|e| e.to_string())?;
                    s.read_exact(&mut answers).map_err(|e| e.to_string())?;
                    ok += answers.chunks(3).filter(|x| x == b"OK\n").count() as u64;
                }
                Ok(ok)
            })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        ok += h.join().map_err(|_| "a client thread panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    let total = (per_conn * a.conns * a.pipeline) as f64;
    println!(
        "pipelined: {} decisions ({} OK) over {} connections, pipeline {}, {} tags: {:.0} decisions/s",
        total,
        ok,
        a.conns,
        a.pipeline,
        a.tags,
        total / secs
    );
    Ok(())
}

fn rtt(a: &Args) -> Result<(), String> {
    let mut s = connect(&a.addr)?;
    let mut lat = Vec::with_capacity(a.n);
    let mut answer = [0u8; 3];
    let tags: Vec<Vec<u8>> = (0..a.tags)
        .map(|t| format!("tag-{t}\n").into_bytes())
        .collect();
    // Warm-up (connection thread, caches), not measured.
    for i in 0..1000.min(a.n) {
        s.write_all(&tags[i % tags.len()])
            .map_err(|e| e.to_string())?;
        s.read_exact(&mut answer).map_err(|e| e.to_string())?;
    }
    for i in 0..a.n {
        let t = Instant::now();
        s.write_all(&tags[i % tags.len()])
            .map_err(|e| e.to_string())?;
        s.read_exact(&mut answer).map_err(|e| e.to_string())?;
        lat.push(t.elapsed());
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "rtt: {} requests one at a time: p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
        a.n,
        q(0.5),
        q(0.99),
        q(0.999),
        q(1.0)
    );
    Ok(())
}
