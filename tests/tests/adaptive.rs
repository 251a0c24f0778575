//! rate_limit.so's `--limit=auto` (issue 34) against a real traffic_server
//! in front of an origin of capacity C = 8 with 50 ms of base latency
//! (processor sharing beyond C): 40 closed-loop clients. The learned limit
//! keeps the origin's median in-flight near C (between 4 and 16), serves at
//! least half its capacity, shows in its metrics and `show`, and `set`
//! pins it and lets it learn again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::capacity_origin::CapacityOrigin;
use ats_tests::client::Conn;
use ats_tests::TrafficServer;
use serde_json::Value;

const C: usize = 8;
const BASE: Duration = Duration::from_millis(50);
const CLIENTS: usize = 40;

fn json(answer: &str) -> Value {
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// `CLIENTS` threads sending one request after another to `host` until
/// `stop`; each counts its answers by status.
fn clients(
    port: u16,
    host: &'static str,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<(u64, u64)>> {
    (0..CLIENTS)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let (mut ok, mut other) = (0, 0);
                let mut conn = None;
                while !stop.load(Ordering::Relaxed) {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match Conn::open(port) {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                other += 1;
                                thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                        },
                    };
                    match c.get(host, "/", &[]) {
                        Ok(r) if r.status == 200 => ok += 1,
                        Ok(_) => other += 1,
                        Err(_) => {
                            conn = None;
                            other += 1;
                        }
                    }
                }
                (ok, other)
            })
        })
        .collect()
}

#[test]
fn the_learned_limit_holds_the_origin_near_its_capacity() {
    let origin = CapacityOrigin::start(C, BASE);
    let rule = format!(
        "map http://a.test/ {} @plugin={} @pparam=--limit=auto @pparam=--queue=1000 \
         @pparam=--maxage=20000 @pparam=--prefix=auto @pparam=--tag=learn\n",
        origin.url(),
        ats_tests::plugin("rate_limit")
    );
    let mut ts = TrafficServer::builder()
        .remap(rule)
        .with_manager()
        .start()
        .expect("start");
    let stop = Arc::new(AtomicBool::new(false));
    let threads = clients(ts.port(), "a.test", &stop);
    // Learning: the start (20), a probe at the minimum, then the gradient.
    thread::sleep(Duration::from_secs(10));
    let (t0, answered0) = (Instant::now(), origin.answered());
    thread::sleep(Duration::from_secs(15));
    let (secs, answered) = (t0.elapsed().as_secs_f64(), origin.answered() - answered0);
    let in_flight = origin.in_flight_since(t0);
    let shown = json(&ts.plugin_msg("rate_limit", "show learn"));
    // Pinned live: the origin holds at most that many from then on (once
    // those admitted before have left).
    let a = json(&ts.plugin_msg("rate_limit", "set learn limit=6"));
    assert_eq!(a["ok"], true, "{a}");
    thread::sleep(Duration::from_secs(1));
    let pinned_since = Instant::now();
    thread::sleep(Duration::from_secs(3));
    let pinned_most = origin.in_flight_since(pinned_since).last().copied();
    stop.store(true, Ordering::Relaxed);
    let (ok, other) = threads
        .into_iter()
        .map(|t| t.join().expect("client"))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    assert!(
        pinned_most.is_some_and(|n| n <= 6),
        "pinned at 6: {pinned_most:?} in flight"
    );
    let median = in_flight.get(in_flight.len() / 2).copied().unwrap_or(0);
    let rate = answered as f64 / secs;
    let capacity = C as f64 / BASE.as_secs_f64();
    eprintln!(
        "median in flight {median} (of {} arrivals), {rate:.0} answers/s (capacity {capacity:.0}), \
         clients {ok} ok {other} not; show: {shown}",
        in_flight.len()
    );
    assert!((4..=16).contains(&median), "median in flight {median}");
    assert!(rate >= capacity / 2.0, "{rate:.0} answers/s");
    assert!(
        other * 100 <= ok,
        "the queue holds the rest: {other} failed of {ok}"
    );
    let limiter = &shown["limiters"][0];
    let limit = limiter["limit"].as_u64().unwrap_or(0);
    assert!(
        (C as u64..=3 * C as u64).contains(&limit),
        "the learned limit: {limiter}"
    );
    assert_eq!(limiter["auto"]["probing"], false, "{limiter}");
    let baseline = limiter["auto"]["rtt_baseline_ms"].as_f64().unwrap_or(0.0);
    assert!(
        (40.0..=100.0).contains(&baseline),
        "the no-load latency: {limiter}"
    );
    // The learned limit is a metric (published every second).
    let metric = ats_tests::wait_until(Duration::from_secs(15), || {
        ts.metric("auto.remap.learn.limit")
            .is_some_and(|l| (4..=2 * C as i64).contains(&l))
    });
    assert!(
        metric,
        "limit metric {:?}",
        ts.metric("auto.remap.learn.limit")
    );

    // Pinned (above), then learning again from there.
    let shown = json(&ts.plugin_msg("rate_limit", "show learn"));
    assert_eq!(shown["limiters"][0]["limit"], 6, "{shown}");
    assert_eq!(shown["limiters"][0]["auto"]["pinned"], true, "{shown}");
    let a = json(&ts.plugin_msg("rate_limit", "set learn limit=auto"));
    assert_eq!(a["ok"], true, "{a}");
    let shown = json(&ts.plugin_msg("rate_limit", "show learn"));
    assert_eq!(shown["limiters"][0]["auto"]["pinned"], false, "{shown}");
    assert!(ts.is_running());
}

/// Bad `--limit=auto` options fail the rule, naming the option.
#[test]
fn auto_with_what_it_cannot_learn_is_refused() {
    let origin = CapacityOrigin::start(C, BASE);
    for (params, says) in [
        (
            "--limit=auto --key=ip",
            "--limit=auto cannot be combined with --key",
        ),
        (
            "--limit=auto --limit-min=9 --limit-max=3",
            "--limit-min=9 is above --limit-max=3",
        ),
        ("--limit=7 --limit-max=9", "--limit-max needs --limit=auto"),
    ] {
        let pp: String = params.split(' ').map(|p| format!(" @pparam={p}")).collect();
        let rule = format!(
            "map http://b.test/ {} @plugin={}{pp}\n",
            origin.url(),
            ats_tests::plugin("rate_limit")
        );
        let e = TrafficServer::builder()
            .remap(rule)
            .start()
            .err()
            .map(|e| e.diags)
            .unwrap_or_else(|| panic!("{params} must fail the rule"));
        assert!(e.contains(says), "{params}: {e}");
    }
}
