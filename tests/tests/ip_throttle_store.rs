//! ip_throttle.so sharing per-IP state through a real memcached, a real
//! redis-server or a real three-master Redis Cluster (`--store`), across real traffic_servers: violations
//! counted by two proxies add up to one ban, which both enforce; another
//! `--instance` keeps its own state; `unban` clears the shared record; with
//! the store down each proxy decides on its own state, within the timeout.
//!
//! Clients bind their own loopback sources (127.0.0.60 and up here).

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{Conn, Response};
use ats_tests::memcached::Memcached;
use ats_tests::redis::Redis;
use ats_tests::redis_cluster::RedisCluster;
use ats_tests::{wait_until, Origin, TrafficServer};

/// The store under test.
enum Store {
    Memcached(Memcached),
    Redis(Redis),
    Cluster(RedisCluster),
}

impl Store {
    fn memcached() -> Store {
        Store::Memcached(Memcached::start().expect("memcached"))
    }

    fn redis() -> Store {
        Store::Redis(Redis::start().expect("redis-server"))
    }

    fn url(&self) -> String {
        match self {
            Store::Memcached(m) => m.url(),
            Store::Redis(r) => r.url(),
            Store::Cluster(c) => c.url(),
        }
    }

    fn get(&self, key: &str) -> Option<String> {
        match self {
            Store::Memcached(m) => m.get(key).expect("get"),
            Store::Redis(r) => {
                let a = r.command(&["GET", key]).expect("GET");
                (!a.starts_with("$-1")).then(|| a.split("\r\n").nth(1).unwrap_or("").to_owned())
            }
            Store::Cluster(c) => {
                let a = c.command(key, &["GET", key]).expect("GET");
                (!a.starts_with("$-1")).then(|| a.split("\r\n").nth(1).unwrap_or("").to_owned())
            }
        }
    }

    fn stop(&mut self) {
        match self {
            Store::Memcached(m) => m.stop(),
            Store::Redis(r) => r.stop(),
            Store::Cluster(c) => (0..c.nodes().len()).for_each(|i| c.node_mut(i).stop()),
        }
    }

    fn restart(&mut self) {
        match self {
            Store::Memcached(m) => m.restart().expect("restart"),
            Store::Redis(r) => r.restart().expect("restart"),
            Store::Cluster(c) => {
                for i in 0..c.nodes().len() {
                    c.node_mut(i).restart().expect("restart");
                }
                c.wait_ok(Duration::from_secs(20)).expect("cluster ok");
            }
        }
    }
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn get(ts: &TrafficServer, src: Ipv4Addr, host: &str) -> Response {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    c.get(host, "/", &[]).expect("response")
}

/// The fifth throttled-or-later request bans; delays of 1 s, then 2 s.
const FAST: &str = "--initial-delay=1 --max-delay=2 --threshold=5 --ban-threshold=2 \
                    --ban-expiration=600";
/// Short delays, for the store-down test, whose bounds add the timeout.
const SHORT: &str = "--initial-delay=0.1 --max-delay=0.2 --threshold=5 --ban-threshold=2 \
                     --ban-expiration=600";

/// How much sooner than its value a delay may end, as the client measures
/// it (ATS's cached clock and whole ms: see foundation.rs).
const TIMER_EARLY: Duration = Duration::from_millis(100);

fn proxy(origin: &Origin, mc: &Store, manager: bool, params: &str) -> TrafficServer {
    let store = format!("--store={} --store-timeout=200", mc.url());
    let remap = ats_tests::rule(
        "ip_throttle",
        "s.test",
        origin,
        &format!("{params} {store} --instance=shop"),
    ) + &ats_tests::rule(
        "ip_throttle",
        "o.test",
        origin,
        &format!("{params} {store} --instance=other"),
    );
    let mut b = TrafficServer::builder().remap(remap);
    if manager {
        b = b.with_manager();
    }
    b.start().expect("start")
}

#[test]
fn two_proxies_add_up_violations_and_both_enforce_the_ban_memcached() {
    two_proxies_add_up_violations_and_both_enforce_the_ban(Store::memcached(), 60);
}

#[test]
fn two_proxies_add_up_violations_and_both_enforce_the_ban_redis() {
    two_proxies_add_up_violations_and_both_enforce_the_ban(Store::redis(), 62);
}

#[test]
fn two_proxies_add_up_violations_and_both_enforce_the_ban_redis_cluster() {
    let c = RedisCluster::start().expect("redis cluster");
    two_proxies_add_up_violations_and_both_enforce_the_ban(Store::Cluster(c), 64);
}

/// The record's phase, delay (ms) and violations, without its time.
fn record_state(mc: &Store, key: &str) -> Option<String> {
    let record = mc.get(key)?;
    let f: Vec<&str> = record.split(' ').collect();
    (f.len() == 5).then(|| format!("{} {} {}", f[1], f[3], f[4]))
}

fn two_proxies_add_up_violations_and_both_enforce_the_ban(mc: Store, last: u8) {
    let origin = Origin::start();
    let (a, b) = (
        proxy(&origin, &mc, true, FAST),
        proxy(&origin, &mc, false, FAST),
    );
    let me = ip(last);
    let key = format!("ipt:shop:127.0.0.{last}");
    // Alternating proxies: pass, delayed (violations 0, 1, 2), then 3 > 2.
    // Each proxy alone saw at most three requests, too few for a ban. Each
    // request goes once the record shows the step before, while that one
    // is still delayed, so it reaches the plugin well within the 2 s (twice
    // the first delay) that keep the IP throttled, however slow the
    // machine; sent after each response with 0.1 s delays, it had what was
    // left of 0.1 s. The record shows the delay shared: 1 s set by B,
    // doubled to 2 s by A.
    let steps = [
        "probation 0 0",
        "throttled 1000 0",
        "throttled 2000 1",
        "throttled 2000 2",
    ];
    let got: Vec<(u16, Duration)> = thread::scope(|s| {
        let sent: Vec<_> = steps
            .iter()
            .enumerate()
            .map(|(i, want)| {
                let ts = if i % 2 == 0 { &a } else { &b };
                let h = s.spawn(move || {
                    let r = get(ts, me, "s.test");
                    (r.status, r.elapsed)
                });
                let mut seen = None;
                let shown = wait_until(Duration::from_secs(10), || {
                    seen = record_state(&mc, &key);
                    seen.as_deref() == Some(*want)
                });
                assert!(shown, "request {i}: record {seen:?}, not '{want}'");
                h
            })
            .collect();
        // The fifth, on A, at once.
        assert_eq!(get(&a, me, "s.test").status, 403);
        sent.into_iter()
            .map(|h| h.join().expect("request"))
            .collect()
    });
    assert!(got.iter().all(|&(status, _)| status == 200), "{got:?}");
    for (i, secs) in [(1, 1), (2, 2), (3, 2)] {
        let delay = Duration::from_secs(secs) - TIMER_EARLY;
        assert!(got[i].1 >= delay, "request {i} not delayed: {got:?}");
    }
    // Both proxies refuse it now; the record says why.
    assert_eq!(get(&b, me, "s.test").status, 403);
    assert_eq!(get(&a, me, "s.test").status, 403);
    let record = mc.get(&key).expect("a record");
    assert!(record.starts_with("1 banned "), "{record}");
    // Another instance on the same store keeps its own state.
    assert_eq!(get(&a, me, "o.test").status, 200);
    // `unban` on A clears the shared record: B lets the client in again.
    let answer = a.plugin_msg("ip_throttle", &format!("unban 127.0.0.{last}"));
    assert!(answer.contains("\"ok\":true"), "{answer}");
    let end = Instant::now() + Duration::from_secs(5);
    while mc.get(&key).is_some() {
        assert!(Instant::now() < end, "the record outlived the unban");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(&b, me, "s.test").status, 200);
    // A logged the ban it set; B the refusals of a ban it learned.
    for (ts, line) in [
        (&a, format!("event=ban ip=127.0.0.{last}")),
        (&b, format!("event=banned ip=127.0.0.{last}")),
    ] {
        let seen = ts.wait_for_log("ip_throttle.log", Duration::from_secs(10), |t| {
            t.contains(&line)
        });
        assert!(seen, "no '{line}':\n{}", ts.log("ip_throttle.log"));
    }
}

#[test]
fn with_memcached_down_each_proxy_decides_alone_within_the_timeout() {
    with_the_store_down_each_proxy_decides_alone_within_the_timeout(Store::memcached(), 61);
}

#[test]
fn with_redis_down_each_proxy_decides_alone_within_the_timeout() {
    with_the_store_down_each_proxy_decides_alone_within_the_timeout(Store::redis(), 63);
}

fn with_the_store_down_each_proxy_decides_alone_within_the_timeout(mut mc: Store, last: u8) {
    let origin = Origin::start();
    let a = proxy(&origin, &mc, true, SHORT);
    let me = ip(last);
    assert_eq!(get(&a, me, "s.test").status, 200);
    mc.stop();
    // Local state from here: it knew the IP in probation, so delayed next.
    let t = Instant::now();
    let r = get(&a, me, "s.test");
    assert_eq!(r.status, 200);
    assert!(
        r.elapsed >= Duration::from_millis(95),
        "the local step delays it: {:?}",
        r.elapsed
    );
    // Never more than the timeout (200 ms) plus the delay plus slack.
    assert!(
        t.elapsed() < Duration::from_millis(200 + 100 + 700),
        "{:?}",
        t.elapsed()
    );
    for _ in 0..3 {
        let t = Instant::now();
        get(&a, me, "s.test");
        assert!(t.elapsed() < Duration::from_millis(200 + 200 + 700));
    }
    let warned = a
        .diags()
        .matches("deciding on this proxy's own state")
        .count();
    assert_eq!(warned, 1, "logged once per interval:\n{}", a.diags());
    // Store errors are counted; decisions before the outage too.
    assert_eq!(
        a.wait_metrics_after(
            &[("plugin.ip_throttle.http.s.test.store_decisions", 1)],
            &[]
        ),
        Ok(())
    );
    let errors = a
        .metric("plugin.ip_throttle.http.s.test.store_errors")
        .unwrap_or(0);
    let timeouts = a
        .metric("plugin.ip_throttle.http.s.test.store_timeouts")
        .unwrap_or(0);
    assert!(
        errors + timeouts >= 1,
        "errors {errors}, timeouts {timeouts}"
    );
    // Back: shared again (the record of this request appears).
    mc.restart();
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        get(&a, me, "s.test");
        if mc.get(&format!("ipt:shop:127.0.0.{last}")).is_some() {
            break;
        }
        assert!(Instant::now() < end, "never wrote to memcached again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Parallel requests of one IP, all on their way to the store at once,
/// still count against `--max-concurrent` (each takes its place when sent).
#[test]
fn parallel_requests_of_one_ip_respect_max_concurrent_with_a_store() {
    let origin = Origin::start();
    let mc = Store::memcached();
    let remap = ats_tests::rule(
        "ip_throttle",
        "s.test",
        &origin,
        &format!(
            "--initial-delay=1 --max-delay=1 --threshold=30 --max-concurrent=1 \
             --store={} --instance=par",
            mc.url()
        ),
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let me = ip(64);
    assert_eq!(get(&ts, me, "s.test").status, 200, "allowed -> probation");
    let port = ts.port();
    let statuses: Vec<u16> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open_from(port, me).expect("connect");
                c.get("s.test", "/", &[]).map_or(0, |r| r.status)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap_or(0))
        .collect();
    let delayed = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!((delayed, refused), (1, 4), "{statuses:?}");
}
