//! rate_limit.so's `--count-status` against a real traffic_server: brute
//! force on a login endpoint (the test origin's `/login`: 401 without
//! `X-Password: good`), charged per client address (distinct loopback
//! sources), a cached 401 charged, and Traffic Server's own errors not.

use std::net::{Ipv4Addr, TcpListener};

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

const GOOD: &[(&str, &str)] = &[("X-Password", "good")];
const BAD: &[(&str, &str)] = &[("X-Password", "guess")];

/// 0.02/s: a token comes back after 50 s, far longer than any test here.
const LOGIN: &str = "--key=ip --count-status=401 --rate=0.02 --burst=3 --retry=60 --tag=login";

fn rule(host: &str, to: &str, params: &str) -> String {
    let pp: String = params
        .split_whitespace()
        .map(|p| format!(" @pparam={p}"))
        .collect();
    format!(
        "map http://{host}/ {to} @plugin={}{pp}\n",
        ats_tests::plugin("rate_limit")
    )
}

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("traffic_server start")
}

/// One login attempt on `c`: the status the client got.
fn login(c: &mut Conn, headers: &[(&str, &str)]) -> u16 {
    login_on(c, "login.test", headers)
}

fn login_on(c: &mut Conn, host: &str, headers: &[(&str, &str)]) -> u16 {
    c.get(host, "/login", headers)
        .map(|r| r.status)
        .unwrap_or(0)
}

#[test]
fn brute_force_is_refused_after_the_burst_of_failures_without_reaching_the_origin() {
    let origin = Origin::start();
    let ts = start(rule("login.test", &origin.url(), LOGIN));
    let mut a = Conn::open_from(ts.port(), ip(2)).expect("connect");
    // Successful logins are never charged: many pass.
    for i in 0..10 {
        assert_eq!(login(&mut a, GOOD), 200, "good login {i}");
    }
    // Failures charge the bucket; successes between them still pass until
    // the failures have exhausted it (burst 3).
    for i in 0..2 {
        assert_eq!(login(&mut a, BAD), 401, "failure {i} reaches the origin");
        assert_eq!(login(&mut a, GOOD), 200, "good login after failure {i}");
    }
    assert_eq!(
        login(&mut a, BAD),
        401,
        "the third failure reaches the origin"
    );
    let reached = origin.count();
    assert_eq!(reached, 10 + 2 * 2 + 1);
    // Now exhausted (3 failures charged, burst 3): every attempt is refused
    // with the rule's error, before the origin.
    for i in 0..5 {
        let r = a.get("login.test", "/login", BAD).expect("response");
        assert_eq!(r.status, 429, "attempt {i}");
        assert_eq!(r.header("Retry-After"), Some("60"));
    }
    assert_eq!(login(&mut a, GOOD), 429, "the key is refused, good or not");
    assert_eq!(origin.count(), reached, "refusals never reach the origin");
    // Another address is unaffected.
    let mut b = Conn::open_from(ts.port(), ip(3)).expect("connect");
    assert_eq!(login(&mut b, BAD), 401);
    assert_eq!(login(&mut b, GOOD), 200);
    assert_eq!(origin.count(), reached + 2);
    // Charged: A's three 401s and B's one; refusals (429) are not.
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.login.status_charged", 4),
        Ok(4)
    );
}

#[test]
fn a_sequential_client_gets_exactly_the_burst_of_failures_through() {
    let origin = Origin::start();
    let ts = start(rule("login.test", &origin.url(), LOGIN));
    let mut a = Conn::open_from(ts.port(), ip(4)).expect("connect");
    let statuses: Vec<u16> = (0..8).map(|_| login(&mut a, BAD)).collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429, 429, 429, 429]);
    assert_eq!(origin.count(), 3);
}

#[test]
fn a_cached_401_is_charged() {
    let origin = Origin::start();
    // 401 is cacheable only through negative caching (listed here); the
    // origin marks it fresh for a minute.
    origin.set_default("X-Origin-CC", "max-age=60");
    let ts = TrafficServer::builder()
        .remap(rule("login.test", &origin.url(), LOGIN))
        .record("proxy.config.http.negative_caching_enabled", "INT 1")
        .record("proxy.config.http.negative_caching_list", "STRING 401")
        .record("proxy.config.http.negative_caching_lifetime", "INT 60")
        .with_manager()
        .start()
        .expect("traffic_server start");
    // Each client fills the cache or hits it; a different address each time
    // keeps the first one's bucket out of it.
    let mut first = Conn::open_from(ts.port(), ip(5)).expect("connect");
    assert_eq!(login(&mut first, BAD), 401);
    assert_eq!(origin.count(), 1);
    let mut c = Conn::open_from(ts.port(), ip(6)).expect("connect");
    let statuses: Vec<u16> = (0..5).map(|_| login(&mut c, BAD)).collect();
    assert_eq!(
        origin.count(),
        1,
        "the 401 must come from the cache for this test to mean anything"
    );
    // Cached 401s charge the client's bucket like the origin's own.
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.login.status_charged", 4),
        Ok(4)
    );
}

#[test]
fn traffic_servers_own_errors_are_not_charged() {
    // A port nobody listens on: ATS answers 502 itself.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(
            rule(
                "down.test",
                &format!("http://127.0.0.1:{closed}"),
                "--key=ip --count-status=5xx --rate=0.02 --burst=2 --tag=down",
            ) + &rule(
                "up.test",
                &origin.url(),
                "--key=ip --count-status=5xx --rate=0.02 --burst=2 --tag=up",
            ),
        )
        .record("proxy.config.http.connect_attempts_max_retries", "INT 0")
        .record(
            "proxy.config.http.connect_attempts_max_retries_down_server",
            "INT 0",
        )
        .with_manager()
        .start()
        .expect("traffic_server start");
    let mut c = Conn::open_from(ts.port(), ip(7)).expect("connect");
    for i in 0..6 {
        let r = c.get("down.test", "/x", &[]).expect("response");
        assert!(
            (500..=599).contains(&r.status) && r.status != 429,
            "request {i}: ATS's own error, never refused: {}",
            r.status
        );
    }
    // The same statuses from the origin are charged (burst 2).
    let mut c = Conn::open_from(ts.port(), ip(8)).expect("connect");
    let statuses: Vec<u16> = (0..4)
        .map(|_| {
            c.get("up.test", "/x", &[("X-Origin-Status", "502")])
                .map(|r| r.status)
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(statuses, [502, 502, 429, 429]);
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.up.status_charged", 2),
        Ok(2)
    );
    assert_eq!(
        ts.metric("plugin.rate_limiter.remap.down.status_charged"),
        Some(0)
    );
}

/// `--dry-run` with `--count-status`: a would-be refusal goes on but is not
/// charged (the live rule would have refused it before the origin), so once
/// the burst of failures is used up every further attempt counts in
/// `dry_run_refused`, and the charges equal the live rule's.
#[test]
fn a_dry_run_counts_each_attempt_past_the_burst_and_charges_as_live() {
    let origin = Origin::start();
    let ts = start(
        rule("login.test", &origin.url(), LOGIN)
            + &rule(
                "dry.test",
                &origin.url(),
                // RateLimit fields: a would-be refusal then keeps state on
                // its transaction (to decorate its response), which must
                // still not charge.
                &LOGIN.replace("--tag=login", "--tag=dry --dry-run --ratelimit-headers"),
            ),
    );
    let attempts = |host: &str| -> Vec<u16> {
        let mut c = Conn::open_from(ts.port(), ip(16)).expect("connect");
        let mut got: Vec<u16> = (0..8).map(|_| login_on(&mut c, host, BAD)).collect();
        got.push(login_on(&mut c, host, GOOD));
        got
    };
    let live = attempts("login.test");
    assert_eq!(live, [401, 401, 401, 429, 429, 429, 429, 429, 429]);
    let dry = attempts("dry.test");
    assert_eq!(
        dry,
        [401, 401, 401, 401, 401, 401, 401, 401, 200],
        "a dry run refuses nothing"
    );
    assert_eq!(
        origin.count(),
        3 + 9,
        "every dry-run attempt reached the origin"
    );
    for (name, want) in [
        ("login.status_charged", 3),
        ("login.rejected", 6),
        ("dry.status_charged", 3),
        ("dry.dry_run_refused", 6),
        ("dry.rejected", 0),
    ] {
        let m = format!("plugin.rate_limiter.remap.{name}");
        assert_eq!(ts.wait_metric(&m, want), Ok(want), "{m}");
    }
}

/// An origin that takes the request and never answers: ATS times out and
/// sends its own 504. ATS has created the (empty) server response header by
/// then, so only its status (0, not 100–599) tells that none was read: two
/// such 504s with a burst of 1 both go through.
#[test]
fn an_origin_that_never_answers_is_not_charged() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "slow.test",
            &origin.url(),
            "--key=ip --count-status=5xx --rate=0.02 --burst=1 --tag=slow",
        ))
        .record(
            "proxy.config.http.transaction_no_activity_timeout_out",
            "INT 1",
        )
        .record("proxy.config.http.connect_attempts_max_retries", "INT 0")
        .with_manager()
        .start()
        .expect("traffic_server start");
    let mut c = Conn::open_from(ts.port(), ip(15)).expect("connect");
    let statuses: Vec<u16> = (0..2)
        .map(|_| {
            c.get("slow.test", "/x", &[("X-Origin-Delay", "4000")])
                .map(|r| r.status)
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(statuses, [504, 504], "ATS's timeouts, never refused");
    assert_eq!(origin.count(), 2, "both reached the origin");
    // (9.2 shows a new plugin metric after the manager's sync.)
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.slow.status_charged", 0),
        Ok(0)
    );
}

/// Requests ATS or a plugin makes itself are no client's attempts: the
/// full-object fetch background_fetch.so starts after a Range request's 206
/// gets a listed 200 and is not charged, while a client's cached 200 is.
#[test]
fn internal_requests_are_not_charged() {
    let origin = Origin::start();
    origin.set_default("X-Origin-CC", "max-age=60");
    origin.set_default("X-Origin-Range-Status", "206");
    let bg = ats_tests::ats::plugin_dir().join("background_fetch.so");
    let ts = start(format!(
        "map http://bg.test/ {} @plugin={} @plugin={} @pparam=--count-status=200 \
         @pparam=--rate=0.02 @pparam=--burst=1 @pparam=--tag=bg\n",
        origin.url(),
        bg.display(),
        ats_tests::plugin("rate_limit")
    ));
    let mut c = Conn::open_from(ts.port(), ip(14)).expect("connect");
    let get = |c: &mut Conn, headers: &[(&str, &str)]| {
        c.get("bg.test", "/a", headers)
            .map(|r| r.status)
            .unwrap_or(0)
    };
    assert_eq!(
        get(&mut c, &[("Range", "bytes=0-0")]),
        206,
        "206 is not listed"
    );
    // The background fetch (no Range: a 200, listed) fills the cache. Wait
    // (bounded) until the object is there: a cache-only request then gets
    // 206 instead of ATS's 504 (neither is listed). Its 200 was sent before
    // the object was complete in the cache, so it has been charged or not.
    let mut last = 0;
    let cached = ats_tests::wait_until(std::time::Duration::from_secs(5), || {
        last = get(
            &mut c,
            &[("Range", "bytes=0-0"), ("Cache-Control", "only-if-cached")],
        );
        last != 504
    });
    assert!(
        cached && last == 206,
        "the background fetch never cached /a: {last}"
    );
    assert_eq!(origin.count(), 2, "the client's request and the fetch");
    // Uncharged, the bucket (burst 1) is full: the client's own cached 200
    // passes and is charged.
    assert_eq!(get(&mut c, &[]), 200);
    assert_eq!(origin.count(), 2, "from the cache");
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.bg.status_charged", 1),
        Ok(1)
    );
}

/// `--store`: the check is made in Redis and the charge goes there (fire
/// and forget), so failures through one proxy count on the other.
#[test]
fn with_store_failures_through_one_proxy_count_on_another() {
    let redis = ats_tests::redis::Redis::start().expect("redis-server");
    let origin = Origin::start();
    let params = format!(
        "--key=ip --count-status=401 --rate=0.02 --burst=3 --group=login --tag=login \
         --store={} --store-failure=closed --store-timeout=500",
        redis.url()
    );
    let p1 = start(rule("login.test", &origin.url(), &params));
    let p2 = start(rule("login.test", &origin.url(), &params));
    let mut a1 = Conn::open_from(p1.port(), ip(9)).expect("connect");
    let mut a2 = Conn::open_from(p2.port(), ip(9)).expect("connect");
    for i in 0..5 {
        assert_eq!(login(&mut a2, GOOD), 200, "good login {i} is never charged");
    }
    assert_eq!(login(&mut a1, BAD), 401);
    assert_eq!(login(&mut a2, BAD), 401);
    assert_eq!(login(&mut a1, BAD), 401);
    // The charge is sent as the response goes out, not waited for: wait
    // (bounded) until Redis holds all three. Checks set no bucket, so the
    // client's is the only one; three tokens of 50 s are ~150 s to expiry.
    let charged = || -> Option<i64> {
        let keys = redis.command(&["KEYS", "rl:*:gcra"]).ok()?;
        let key = keys.lines().find(|l| l.starts_with("rl:"))?;
        redis.int(&["PTTL", key]).ok()
    };
    assert!(
        ats_tests::wait_until(std::time::Duration::from_secs(5), || {
            charged().is_some_and(|ms| ms > 120_000)
        }),
        "Redis never held the three charges: {:?} ms to expiry",
        charged()
    );
    assert_eq!(
        login(&mut a2, BAD),
        429,
        "three failures across both proxies"
    );
    assert_eq!(login(&mut a1, GOOD), 429);
    assert_eq!(origin.count(), 5 + 3);
    // Another address is unaffected.
    let mut b = Conn::open_from(p1.port(), ip(10)).expect("connect");
    assert_eq!(login(&mut b, GOOD), 200);
    assert_eq!(
        p1.wait_metric("plugin.rate_limiter.remap.login.status_charged", 2),
        Ok(2)
    );
    assert_eq!(
        p2.wait_metric("plugin.rate_limiter.remap.login.status_charged", 1),
        Ok(1)
    );
    assert_eq!(
        p1.metric("plugin.rate_limiter.remap.login.store_errors"),
        Some(0)
    );
}

/// With `--limit` the slots still count requests: a failure that waited for
/// a slot is charged like one admitted at once, and `--limit=1` per key
/// keeps a client to one attempt in flight.
#[test]
fn with_a_limit_a_failure_that_waited_for_its_slot_is_charged() {
    let origin = Origin::start();
    let ts = start(rule(
        "login.test",
        &origin.url(),
        "--key=ip --count-status=401 --rate=0.02 --burst=2 --limit=1 --tag=login",
    ));
    let port = ts.port();
    let slow: &[(&str, &str)] = &[("X-Password", "guess"), ("X-Origin-Delay", "300")];
    // Two at once from one address: the second waits for the first's slot.
    let attempts: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(100 * i));
                let mut c = Conn::open_from(port, ip(11)).expect("connect");
                login(&mut c, slow)
            })
        })
        .collect();
    let statuses: Vec<u16> = attempts
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(statuses, [401, 401]);
    assert_eq!(origin.max_in_flight(), 1, "one at a time per key");
    // Both were charged: the burst of 2 is used up.
    let mut c = Conn::open_from(port, ip(11)).expect("connect");
    assert_eq!(login(&mut c, GOOD), 429);
    assert_eq!(origin.count(), 2);
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.login.status_charged", 2),
        Ok(2)
    );
    assert_eq!(ts.metric("plugin.rate_limiter.remap.login.queued"), Some(1));
}

/// `--peers`: a charge is a hit in the next report, so failures through one
/// proxy empty the client's bucket on its peer too.
#[test]
fn with_peers_failures_through_one_proxy_count_on_the_other() {
    let udp = || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp bind");
        s.local_addr().expect("addr").port()
    };
    let (u1, u2) = (udp(), udp());
    let origin = Origin::start();
    let server = |listen: u16, peer: u16| {
        TrafficServer::builder()
            .config_file("peer.secret", "count-status-test-secret-0123456789\n")
            .remap(rule(
                "login.test",
                &origin.url(),
                &format!(
                    "--key=ip --count-status=401 --rate=0.02 --burst=3 --tag=login --group=login \
                     --peers=127.0.0.1:{peer} --peer-listen=127.0.0.1:{listen} \
                     --peer-period=100 --peer-secret-file=peer.secret"
                ),
            ))
            .with_manager()
            .start()
            .expect("traffic_server start")
    };
    let (p1, p2) = (server(u1, u2), server(u2, u1));
    let mut a1 = Conn::open_from(p1.port(), ip(12)).expect("connect");
    let mut a2 = Conn::open_from(p2.port(), ip(12)).expect("connect");
    // Two failures here, one there: neither proxy alone has seen three.
    assert_eq!(login(&mut a1, BAD), 401);
    assert_eq!(login(&mut a1, BAD), 401);
    assert_eq!(login(&mut a2, BAD), 401);
    // Good logins are never charged: they pass until the peers' reports
    // arrive, then both proxies refuse the key (bounded: 5 s).
    let refused_on = |c: &mut Conn| {
        ats_tests::wait_until(std::time::Duration::from_secs(5), || login(c, GOOD) == 429)
    };
    assert!(refused_on(&mut a1), "p1 never learnt p2's charge");
    assert!(refused_on(&mut a2), "p2 never learnt p1's charges");
    // Another address is unaffected on both.
    let mut b = Conn::open_from(p2.port(), ip(13)).expect("connect");
    assert_eq!(login(&mut b, GOOD), 200);
    assert_eq!(
        p1.wait_metric("plugin.rate_limiter.remap.login.status_charged", 2),
        Ok(2)
    );
}
