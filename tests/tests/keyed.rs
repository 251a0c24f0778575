//! rate_limit.so with `--key` against a real traffic_server: limits per
//! client address (real distinct loopback sources), header, cookie and query
//! keys, the missing-key policies, trusted-proxy `X-Forwarded-For`, prefix
//! aggregation, and the bound on keys held.

use std::net::Ipv4Addr;
use std::thread;
use std::time::Duration;

use ats_tests::client::{Conn, Response};
use ats_tests::{wait_until, Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// `n` requests in a row from source address `from` on one connection.
fn from(ts: &TrafficServer, src: Ipv4Addr, host: &str, n: usize, h: &[(&str, &str)]) -> Vec<u16> {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    (0..n)
        .map(|i| {
            c.get(host, &format!("/r{i}"), h)
                .map(|r| r.status)
                .unwrap_or(0)
        })
        .collect()
}

fn ok(statuses: &[u16]) -> usize {
    statuses.iter().filter(|&&s| s == 200).count()
}

fn refused(statuses: &[u16]) -> usize {
    statuses.iter().filter(|&&s| s == 429).count()
}

fn get(ts: &TrafficServer, host: &str, h: &[(&str, &str)]) -> Response {
    ts.get(host, "/", h).expect("request")
}

#[test]
fn a_flooding_address_is_limited_and_the_others_are_not() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "k.test",
            &origin,
            "--rate=0.01 --burst=5 --queue=0 --key=ip",
        ))
        .start()
        .expect("start");
    let flood = from(&ts, ip(2), "k.test", 30, &[]);
    assert_eq!(ok(&flood), 5, "{flood:?}");
    assert_eq!(refused(&flood), 25, "{flood:?}");
    // Other clients, each with its own bucket, are unaffected.
    for last in 3..=6 {
        let s = from(&ts, ip(last), "k.test", 5, &[]);
        assert_eq!(ok(&s), 5, "127.0.0.{last}: {s:?}");
    }
    assert_eq!(origin.count(), 25);
}

#[test]
fn concurrency_and_queue_are_per_address() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("k.test", &origin, "--limit=1 --queue=0 --key=ip"))
        .start()
        .expect("start");
    let port = ts.port();
    // 127.0.0.2 holds its one slot with a slow request …
    let slow = thread::spawn(move || {
        let mut c = Conn::open_from(port, ip(2)).expect("connect");
        c.get("k.test", "/slow", &[("X-Origin-Delay", "1500")])
            .map(|r| r.status)
    });
    assert!(wait_until(Duration::from_secs(5), || origin.in_flight() == 1));
    // … so its next concurrent request is refused, while 127.0.0.3 goes.
    let mut c2 = Conn::open_from(port, ip(2)).expect("connect");
    assert_eq!(
        c2.get("k.test", "/second", &[]).map(|r| r.status).ok(),
        Some(429)
    );
    let mut c3 = Conn::open_from(port, ip(3)).expect("connect");
    assert_eq!(
        c3.get("k.test", "/other", &[]).map(|r| r.status).ok(),
        Some(200)
    );
    assert_eq!(slow.join().expect("thread").ok(), Some(200));
    // Its slot came back at TXN_CLOSE.
    assert!(wait_until(Duration::from_secs(5), || {
        c2.get("k.test", "/again", &[]).map(|r| r.status).ok() == Some(200)
    }));
}

#[test]
fn header_cookie_and_query_keys() {
    let origin = Origin::start();
    let remap = [
        rule(
            "h.test",
            &origin,
            "--rate=0.01 --burst=2 --queue=0 --key=header:X-User",
        ),
        rule(
            "c.test",
            &origin,
            "--rate=0.01 --burst=2 --queue=0 --key=cookie:sid",
        ),
        rule(
            "q.test",
            &origin,
            "--rate=0.01 --burst=2 --queue=0 --key=query:api_key",
        ),
    ]
    .concat();
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let status = |host: &str, path: &str, h: &[(&str, &str)]| {
        ts.get(host, path, h).map(|r| r.status).unwrap_or(0)
    };
    for (host, alice, bob) in [
        (
            "h.test",
            ("/", ("X-User", "alice")),
            ("/", ("X-User", "bob")),
        ),
        (
            "c.test",
            ("/", ("Cookie", "a=1; sid=alice")),
            ("/", ("Cookie", "sid=bob")),
        ),
        (
            "q.test",
            ("/?api_key=alice", ("X-N", "1")),
            ("/?x=1&api_key=bob", ("X-N", "1")),
        ),
    ] {
        let a: Vec<u16> = (0..3).map(|_| status(host, alice.0, &[alice.1])).collect();
        assert_eq!(a, [200, 200, 429], "{host} alice");
        assert_eq!(
            status(host, bob.0, &[bob.1]),
            200,
            "{host} bob has his own bucket"
        );
    }
}

#[test]
fn requests_without_their_key_follow_the_missing_policy() {
    let origin = Origin::start();
    let base = "--rate=0.01 --burst=2 --queue=0 --key=header:X-User";
    let remap = [
        rule(
            "shared.test",
            &origin,
            &format!("{base} --key-missing=shared"),
        ),
        rule("pass.test", &origin, &format!("{base} --key-missing=pass")),
        rule(
            "refuse.test",
            &origin,
            &format!("{base} --key-missing=refuse"),
        ),
    ]
    .concat();
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let statuses =
        |host: &str| -> Vec<u16> { (0..4).map(|_| get(&ts, host, &[]).status).collect() };
    assert_eq!(
        statuses("shared.test"),
        [200, 200, 429, 429],
        "one bucket for all keyless"
    );
    assert_eq!(
        statuses("pass.test"),
        [200, 200, 200, 200],
        "keyless pass unlimited"
    );
    assert_eq!(
        statuses("refuse.test"),
        [429, 429, 429, 429],
        "keyless refused"
    );
    // With the key, the usual limit.
    assert_eq!(get(&ts, "refuse.test", &[("X-User", "u")]).status, 200);
}

#[test]
fn behind_a_trusted_proxy_the_forwarded_client_is_the_key() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "x.test",
            &origin,
            "--rate=0.01 --burst=1 --queue=0 --key=ip --trusted-proxies=127.0.0.2",
        ))
        .start()
        .expect("start");
    let lb = |xff: &str| from(&ts, ip(2), "x.test", 1, &[("X-Forwarded-For", xff)])[0];
    assert_eq!(lb("198.51.100.1"), 200);
    // The same client behind the balancer, with a spoofed left-most entry.
    assert_eq!(lb("6.6.6.6, 198.51.100.1"), 429);
    assert_eq!(
        lb("198.51.100.2"),
        200,
        "another client behind the balancer"
    );
    // An untrusted peer is keyed on its own address, whatever it claims.
    let direct = |xff: &str| from(&ts, ip(3), "x.test", 1, &[("X-Forwarded-For", xff)])[0];
    assert_eq!(direct("198.51.100.3"), 200);
    assert_eq!(direct("198.51.100.4"), 429);
}

/// A client the trusted proxies do not name (`unknown`, `_hidden`, no
/// header) is never the proxy: not exempt with the proxies' network (the
/// docs' example), and one key for all such clients, apart from the
/// proxy's address and not `--key-missing`.
#[test]
fn an_unknown_client_behind_a_trusted_proxy_is_not_the_proxy() {
    let origin = Origin::start();
    let trusted = "--trusted-proxies=127.0.0.2,127.0.0.3";
    let remap = [
        // A rule-wide bucket of 1: only a request that is not exempt takes it.
        rule(
            "ex.test",
            &origin,
            &format!("--rate=0.01 --burst=1 --queue=0 {trusted} --exempt=127.0.0.0/8"),
        ),
        rule(
            "k.test",
            &origin,
            &format!(
                "--rate=0.01 --burst=1 --queue=0 --key=ip --key-missing=refuse {trusted} \
                 --log=unknown_clients --tag=k"
            ),
        ),
    ]
    .concat();
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let via = |lb: u8, host: &str, h: &[(&str, &str)]| from(&ts, ip(lb), host, 1, h)[0];
    let (unknown, hidden) = (
        [("X-Forwarded-For", "unknown")],
        [("X-Forwarded-For", "_hidden")],
    );
    // Not exempt: the first unnamed client takes the bucket's token, the
    // next ones (through either proxy) find it empty.
    assert_eq!(via(2, "ex.test", &unknown), 200);
    assert_eq!(via(3, "ex.test", &hidden), 429);
    assert_eq!(via(2, "ex.test", &[]), 429);
    // A client the proxies name inside the exempt network still is exempt.
    let internal = [("X-Forwarded-For", "127.0.0.9")];
    assert_eq!(via(2, "ex.test", &internal), 200);
    // One key for every unnamed client (a key, not --key-missing=refuse's
    // refusal), through either proxy.
    assert_eq!(via(2, "k.test", &unknown), 200);
    assert_eq!(via(3, "k.test", &hidden), 429);
    assert_eq!(
        via(3, "k.test", &[("X-Forwarded-For", "198.51.100.1, bad")]),
        429
    );
    // Apart from the proxies' own addresses (all-trusted chains) and named clients.
    assert_eq!(via(2, "k.test", &[("X-Forwarded-For", "127.0.0.2")]), 200);
    assert_eq!(via(3, "k.test", &[("X-Forwarded-For", "127.0.0.3")]), 200);
    assert_eq!(
        via(2, "k.test", &[("X-Forwarded-For", "198.51.100.1")]),
        200
    );
    // Refusals name it.
    let logged = ts.wait_for_log("unknown_clients.log", Duration::from_secs(20), |t| {
        t.matches("client=unknown key=ip%3Dunknown reason=rate")
            .count()
            >= 2
    });
    let log = ts.log("unknown_clients.log");
    assert!(logged, "{log}");
    assert!(!log.contains("client=127.0.0."), "{log}");
}

#[test]
fn only_the_forwarding_header_the_proxies_write_is_read() {
    let origin = Origin::start();
    let base = "--rate=0.01 --burst=1 --queue=0 --key=ip --trusted-proxies=127.0.0.2";
    let remap = [
        rule("xff.test", &origin, base),
        rule(
            "fwd.test",
            &origin,
            &format!("{base} --forwarded-header=Forwarded"),
        ),
    ]
    .concat();
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    let lb = |host: &str, h: &[(&str, &str)]| from(&ts, ip(2), host, 1, h)[0];
    // Behind an RFC 7239 proxy, a client's own X-Forwarded-For is not believed.
    assert_eq!(lb("fwd.test", &[("Forwarded", "for=198.51.100.1")]), 200);
    let spoof = [
        ("X-Forwarded-For", "6.6.6.6"),
        ("Forwarded", "for=198.51.100.1"),
    ];
    assert_eq!(
        lb("fwd.test", &spoof),
        429,
        "the same client, whatever its XFF"
    );
    // Behind an X-Forwarded-For proxy, a client's own Forwarded is not believed.
    assert_eq!(lb("xff.test", &[("X-Forwarded-For", "198.51.100.1")]), 200);
    let spoof = [
        ("Forwarded", "for=6.6.6.6"),
        ("X-Forwarded-For", "198.51.100.1"),
    ];
    assert_eq!(lb("xff.test", &spoof), 429);
    // A padded chain cannot push the proxy's entry out of what is read.
    let mut padded = "1.1.1.1, ".repeat(2000);
    padded.push_str("6.6.6.7");
    let chain = [
        ("X-Forwarded-For", padded.as_str()),
        ("X-Forwarded-For", "198.51.100.1"),
    ];
    assert_eq!(lb("xff.test", &chain), 429, "still 198.51.100.1");
}

#[test]
fn addresses_aggregate_by_prefix() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "p.test",
            &origin,
            "--rate=0.01 --burst=1 --queue=0 --key=ip --key-prefix=24/64",
        ))
        .start()
        .expect("start");
    assert_eq!(from(&ts, ip(2), "p.test", 1, &[]), [200]);
    assert_eq!(from(&ts, ip(3), "p.test", 1, &[]), [429], "same /24");
    let other = Ipv4Addr::new(127, 0, 1, 2);
    assert_eq!(from(&ts, other, "p.test", 1, &[]), [200], "another /24");
}

/// The scale: 100 000 distinct keys through a `--keys=10000` rule.
/// The table never holds more than 10 000, every key beyond them evicted an
/// idle one, and traffic_server's memory does not grow with the keys seen.
#[test]
fn keys_held_stay_within_the_bound() {
    const KEYS: usize = 10_000;
    const SEEN: usize = 100_000;
    /// Keys sent before the first RSS reading: the table is full by then.
    const WARM: usize = 20_000;
    const THREADS: usize = 4;
    /// Requests per pipelined write: few round trips, small socket buffers.
    const BATCH: usize = 50;
    let origin = Origin::start();
    // One cached object: ATS answers from its cache after the first request,
    // so the origin's speed does not bound the test (rate_limit's remap hook
    // runs before the cache lookup: every request still counts its key).
    origin.set_default("X-Origin-CC", "public, max-age=3600");
    let ts = TrafficServer::builder()
        .remap(rule(
            "b.test",
            &origin,
            &format!("--rate=100 --burst=10 --queue=0 --key=header:X-K --keys={KEYS} --prefix=kb --tag=bound"),
        ))
        .with_manager()
        .start()
        .expect("start");
    let send = |keys: std::ops::Range<usize>| {
        let port = ts.port();
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let keys = keys.clone();
                thread::spawn(move || {
                    let mut c = Conn::open(port).expect("connect");
                    let mine: Vec<usize> = keys.skip(t).step_by(THREADS).collect();
                    let mut okays = 0;
                    for batch in mine.chunks(BATCH) {
                        let headers: Vec<_> = batch
                            .iter()
                            .map(|k| vec![("X-K".to_owned(), format!("client-{k}"))])
                            .collect();
                        let rs = c.pipeline("b.test", "/", &headers).expect("pipeline");
                        okays += rs.iter().filter(|r| r.status == 200).count();
                    }
                    okays
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sender"))
            .sum::<usize>()
    };
    assert_eq!(send(0..WARM), WARM, "every new key has a full bucket");
    let rss_warm = ts.rss_kb().expect("rss");
    assert_eq!(send(WARM..SEEN), SEEN - WARM);
    let rss_full = ts.rss_kb().expect("rss");
    // keys/evicted are published every second, then lag like any metric.
    // Every insert into a full shard evicts one idle key (all are idle
    // here), so keys + evicted == SEEN exactly (unless two of the keys'
    // 64-bit hashes collide: odds 3 in 10^10), and only once both read
    // their final values: each earlier snapshot sums to less. That sum is
    // the proof that the metrics synced. keys must never read above KEYS.
    let (mut keys, mut evicted) = (-1, -1);
    let synced = wait_until(Duration::from_secs(30), || {
        evicted = ts.metric("kb.remap.bound.evicted").unwrap_or(-1);
        keys = ts.metric("kb.remap.bound.keys").unwrap_or(-1);
        assert!(keys <= KEYS as i64, "keys = {keys}");
        keys >= 0 && keys + evicted == SEEN as i64
    });
    assert!(synced, "evicted = {evicted}, keys = {keys}");
    // 10 000 keys make 9 shards of 1 111 or 1 112 keys (crates/keyed). The
    // bound is their sum, so keys == KEYS once every shard has filled; a
    // shard fills unless fewer than 1 112 of the 100 000 random keys land
    // in it (expected 11 111, sd 99): never, in practice.
    assert_eq!(keys, KEYS as i64, "every shard full");
    // The 80 000 keys after the table filled did not grow it (a few MB of
    // slack for ATS's own allocator and buffers).
    assert!(
        rss_full <= rss_warm + 4 * 1024,
        "RSS grew from {rss_warm} kB to {rss_full} kB"
    );
    eprintln!(
        "RSS {rss_warm} kB after {WARM} keys, {rss_full} kB after {SEEN}; evicted {evicted}; {} at the origin",
        origin.count()
    );
}
