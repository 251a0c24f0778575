//! rate_limit.so's penalty box (`--block=SECONDS`, issue 33) and per-key
//! commands against a real traffic_server: a client over its rate stays
//! refused after its bucket refills, then is served; `unblock` frees it
//! early, `block` refuses a client never seen, `keys` lists the hottest
//! keys, and bad commands change nothing. With `--store`, a block made
//! on one proxy refuses the client on another at once.

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::redis::Redis;
use ats_tests::{Origin, TrafficServer};
use serde_json::Value;

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

/// One request to `host` from the loopback address `from`.
fn get(ts: &TrafficServer, host: &str, from: [u8; 4]) -> u16 {
    let mut c = Conn::open_from(ts.port(), Ipv4Addr::from(from)).expect("connect");
    c.get(host, "/", &[]).expect("response").status
}

fn json(answer: &str) -> Value {
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

const A: [u8; 4] = [127, 0, 0, 2];
const B: [u8; 4] = [127, 0, 0, 3];

#[test]
fn a_client_over_its_rate_stays_refused_for_the_block_then_is_served() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "b.test",
            &origin,
            "--key=ip --rate=1 --burst=1 --block=3 --queue=0 --prefix=blk --tag=pen \
             --log=rl_block --ratelimit-headers",
        ))
        .with_manager()
        .start()
        .expect("start");
    assert_eq!(get(&ts, "b.test", A), 200);
    assert_eq!(
        get(&ts, "b.test", A),
        429,
        "over its rate: the block starts"
    );
    let started = Instant::now();
    // Its bucket refills after 1 s; the block holds for 3.
    sleep(Duration::from_millis(1500));
    // Told to come back when the block ends, not that its bucket is full.
    let mut c = Conn::open_from(ts.port(), Ipv4Addr::from(A)).expect("connect");
    let r = c.get("b.test", "/", &[]).expect("response");
    assert_eq!(r.status, 429, "still blocked with a full bucket");
    assert_eq!(
        r.header("Retry-After"),
        Some("2"),
        "the block's seconds left"
    );
    let fields = r.header("RateLimit").unwrap_or_default().to_owned();
    assert!(fields.contains("r=0;t=2"), "{fields}");
    assert_eq!(get(&ts, "b.test", A), 429);
    assert_eq!(get(&ts, "b.test", B), 200, "another client is not blocked");
    let a = json(&ts.plugin_msg("rate_limit", "key pen 127.0.0.2"));
    assert_eq!(a["held"], true, "{a}");
    let left = a["blocked_ms"].as_u64().unwrap_or(0);
    assert!((1..=1500).contains(&left), "{a}");
    sleep(Duration::from_secs(3).saturating_sub(started.elapsed()) + Duration::from_millis(200));
    assert_eq!(get(&ts, "b.test", A), 200, "served once the block is over");
    // One block started, two requests refused by it, one line logged for it.
    assert_eq!(ts.wait_metric("blk.remap.pen.blocks", 1), Ok(1));
    assert_eq!(ts.wait_metric("blk.remap.pen.blocked", 2), Ok(2));
    assert_eq!(ts.wait_metric("blk.remap.pen.rejected", 3), Ok(3));
    assert!(
        ts.wait_for_log("rl_block.log", Duration::from_secs(15), |t| t
            .contains("reason=blocked")),
        "no block line: {}",
        ts.log("rl_block.log")
    );
    let log = ts.log("rl_block.log");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" event=")).collect();
    assert_eq!(
        lines.len(),
        1,
        "one line per block, none per refusal: {log}"
    );
    assert!(
        lines[0].contains("client=127.0.0.2 ") && lines[0].contains(" reason=blocked "),
        "{log}"
    );
}

#[test]
fn operators_block_unblock_forget_and_list_keys_and_bad_commands_change_nothing() {
    let origin = Origin::start();
    let mut ts = TrafficServer::builder()
        .remap(
            rule(
                "k.test",
                &origin,
                "--key=ip --rate=1 --burst=1 --block=60 --queue=0 --prefix=blk --tag=keyed",
            ) + &rule("r.test", &origin, "--rate=100 --prefix=blk --tag=whole"),
        )
        .with_manager()
        .start()
        .expect("start");
    // A over its rate: blocked for a minute; `unblock` frees it early.
    assert_eq!(get(&ts, "k.test", A), 200);
    assert_eq!(get(&ts, "k.test", A), 429);
    let a = json(&ts.plugin_msg("rate_limit", "key keyed ip=127.0.0.2"));
    assert!(a["blocked_ms"].as_u64().unwrap_or(0) > 50_000, "{a}");
    sleep(Duration::from_millis(1100));
    assert_eq!(get(&ts, "k.test", A), 429, "blocked with a full bucket");
    let a = json(&ts.plugin_msg("rate_limit", "unblock keyed 127.0.0.2"));
    assert_eq!(
        (a["ok"].clone(), a["unblocked"].clone()),
        (true.into(), true.into()),
        "{a}"
    );
    assert_eq!(
        get(&ts, "k.test", A),
        200,
        "unblocked: its full bucket serves it"
    );
    let a = json(&ts.plugin_msg("rate_limit", "unblock keyed 127.0.0.2"));
    assert_eq!(
        a["unblocked"], false,
        "a result line for a key not blocked: {a}"
    );

    // `block` of keys never seen refuses them; `keys` lists them, longest
    // block first among them.
    for (ip, secs) in [("127.0.0.4", 100), ("127.0.0.5", 300), ("127.0.0.6", 200)] {
        let a = json(&ts.plugin_msg("rate_limit", &format!("block keyed {ip} {secs}")));
        assert_eq!(a["blocked_s"], secs, "{a}");
    }
    assert_eq!(get(&ts, "k.test", [127, 0, 0, 4]), 429);
    assert_eq!(get(&ts, "k.test", [127, 0, 0, 5]), 429);
    let a = json(&ts.plugin_msg("rate_limit", "keys keyed"));
    let order: Vec<&str> = a["keys"]
        .as_array()
        .map(|k| k.iter().filter_map(|k| k["key"].as_str()).collect())
        .unwrap_or_default();
    let at = |k: &str| order.iter().position(|o| *o == k);
    let (four, five, six) = (at("ip=127.0.0.4"), at("ip=127.0.0.5"), at("ip=127.0.0.6"));
    assert!(
        four.is_some() && five.is_some() && six.is_some() && five < six && six < four,
        "the blocked keys, longest block first: {a}"
    );
    // `forget` lifts a block and fills the bucket.
    let a = json(&ts.plugin_msg("rate_limit", "forget keyed 127.0.0.5"));
    assert_eq!(a["forgotten"], true, "{a}");
    assert_eq!(get(&ts, "k.test", [127, 0, 0, 5]), 200);
    let a = json(&ts.plugin_msg("rate_limit", "key keyed 127.0.0.99"));
    assert_eq!(a["held"], false, "{a}");

    // A rule without --key: the rule's own state is '*'.
    let a = json(&ts.plugin_msg("rate_limit", "block whole * 30"));
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(get(&ts, "r.test", B), 429, "the whole rule is blocked");
    let a = json(&ts.plugin_msg("rate_limit", "unblock whole *"));
    assert_eq!(a["unblocked"], true, "{a}");
    assert_eq!(get(&ts, "r.test", B), 200);

    // Bad commands: an error naming what was wrong, and nothing changes.
    for (cmd, says) in [
        (
            "block keyed 127.0.0.2 0",
            "SECONDS has an invalid value '0'",
        ),
        (
            "block keyed alice 10",
            "'alice' is not a key of rule http://k.test/",
        ),
        (
            "block nosuch 127.0.0.2 10",
            "no group or rule named 'nosuch'",
        ),
        ("key keyed *", "'*' is not a key of rule"),
        (
            "unblock whole 127.0.0.2",
            "has no --key: its own state is KEY *",
        ),
        ("forget keyed", "forget: wrong arguments"),
    ] {
        let a = json(&ts.plugin_msg("rate_limit", cmd));
        assert_eq!(a["ok"], false, "{cmd}: {a}");
        let e = a["error"].as_str().unwrap_or("");
        assert!(e.contains(says), "{cmd}: {e}");
    }
    let a = json(&ts.plugin_msg("rate_limit", "key keyed 127.0.0.2"));
    assert_eq!(a["blocked_ms"], 0, "A was not blocked again: {a}");
    assert_eq!(get(&ts, "k.test", B), 200, "B was never blocked");
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );
}

/// Exact `--store`: the block lives in Redis, so the other proxy refuses
/// the client at its next request (no delay: the same script decides).
#[test]
fn a_block_in_redis_refuses_the_client_on_every_proxy() {
    let redis = Redis::start().expect("redis-server");
    let origin = Origin::start();
    let params = format!(
        "--key=ip --rate=1 --burst=1 --block=3 --queue=0 --prefix=blk --tag=fleet \
         --store={} --store-failure=closed",
        redis.url()
    );
    let start = || {
        TrafficServer::builder()
            .remap(rule("s.test", &origin, &params))
            .with_manager()
            .start()
            .expect("start")
    };
    let (one, two) = (start(), start());
    assert_eq!(get(&one, "s.test", A), 200);
    assert_eq!(get(&one, "s.test", A), 429, "over its rate on one: blocked");
    let started = Instant::now();
    assert_eq!(get(&two, "s.test", A), 429, "the other proxy refuses it");
    sleep(Duration::from_millis(1500));
    assert_eq!(get(&two, "s.test", A), 429, "still, with a full bucket");
    assert_eq!(get(&two, "s.test", B), 200, "another client is served");
    sleep(Duration::from_secs(3).saturating_sub(started.elapsed()) + Duration::from_millis(200));
    assert_eq!(get(&two, "s.test", A), 200, "the block expired in Redis");
    // The per-key commands do not reach Redis, but say where a block is:
    // deleting that key lifts it at once on every proxy.
    assert_eq!(get(&one, "s.test", B), 200);
    assert_eq!(get(&one, "s.test", B), 429, "B blocked");
    let a = json(&one.plugin_msg("rate_limit", "unblock fleet 127.0.0.3"));
    let e = a["error"].as_str().unwrap_or_default();
    let block_key = e
        .split_once("Redis's ")
        .and_then(|(_, k)| k.split_once(' '))
        .map(|(k, _)| k.to_owned())
        .unwrap_or_else(|| panic!("no Redis key in {e:?}"));
    assert!(
        block_key.starts_with("rl:{fleet:") && block_key.ends_with("}:block"),
        "{e}"
    );
    assert_eq!(redis.int(&["DEL", &block_key]), Ok(1), "that is B's block");
    sleep(Duration::from_millis(1100));
    assert_eq!(get(&two, "s.test", B), 200, "lifted for every proxy");
    // A's block and B's, both started on one; two refused A twice.
    assert_eq!(one.wait_metric("blk.remap.fleet.blocks", 2), Ok(2));
    assert_eq!(two.wait_metric("blk.remap.fleet.blocked", 2), Ok(2));
}

/// `--peers`: a block started on one proxy (by a refusal, or the `block`
/// command) reaches the other in the next report (`--peer-period`), and
/// refuses the client there after its bucket has refilled.
#[test]
fn a_block_reaches_the_peers_in_the_next_report() {
    const SECRET: &str = "integration-test-secret-0123456789";
    let origin = Origin::start();
    let port = || {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .expect("udp port")
    };
    let (p1, p2) = (port(), port());
    let start = |listen: u16, peer: u16| {
        let params = format!(
            "--key=ip --rate=1 --burst=1 --queue=0 --block=4 --prefix=blk --tag=peered \
             --group=pb --peers=127.0.0.1:{peer} --peer-listen=127.0.0.1:{listen} \
             --peer-period=100 --peer-secret-file=peer.secret"
        );
        TrafficServer::builder()
            .config_file("peer.secret", &format!("{SECRET}\n"))
            .remap(rule("p.test", &origin, &params))
            .with_manager()
            .start()
            .expect("start")
    };
    let (one, two) = (start(p1, p2), start(p2, p1));
    assert_eq!(get(&one, "p.test", A), 200);
    assert_eq!(get(&one, "p.test", A), 429, "over its rate on one: blocked");
    let started = Instant::now();
    // A peered key is listed by the name the commands take back.
    let a = json(&one.plugin_msg("rate_limit", "keys peered"));
    let listed = a["keys"].as_array().map_or(0, |k| {
        k.iter()
            .filter(|k| k["key"] == "ip=127.0.0.2" && k["blocked_ms"].as_u64() > Some(0))
            .count()
    });
    assert_eq!(listed, 1, "{a}");
    let a = json(&one.plugin_msg("rate_limit", "key peered ip=127.0.0.2"));
    assert_eq!(a["held"], true, "{a}");
    // Past the refill of its bucket (and of the peer's hit): only the
    // block refuses it on two, which never refused it itself.
    sleep(Duration::from_millis(2200));
    assert_eq!(get(&two, "p.test", A), 429, "two heard of the block");
    assert_eq!(get(&two, "p.test", B), 200, "another client is served");
    assert_eq!(two.wait_metric("blk.remap.peered.blocked", 1), Ok(1));
    assert_eq!(
        two.wait_metric("plugin.rate_limiter.peer_blocks_applied", 1),
        Ok(1)
    );
    sleep(Duration::from_secs(4).saturating_sub(started.elapsed()) + Duration::from_millis(300));
    assert_eq!(get(&two, "p.test", A), 200, "the block is over on two");

    // A block by command is told to the peers too.
    let a = json(&one.plugin_msg("rate_limit", "block peered 127.0.0.4 30"));
    assert_eq!(a["blocked_s"], 30, "{a}");
    let heard = ats_tests::wait_until(Duration::from_secs(10), || {
        two.plugin_msg("rate_limit", "key peered 127.0.0.4")
            .contains("\"held\":true")
    });
    assert!(heard, "two never heard of the block");
    assert_eq!(get(&two, "p.test", [127, 0, 0, 4]), 429);
    // Unblocking is each proxy's own.
    let a = json(&two.plugin_msg("rate_limit", "unblock peered 127.0.0.4"));
    assert_eq!(a["unblocked"], true, "{a}");
    assert_eq!(get(&two, "p.test", [127, 0, 0, 4]), 200);
    assert_eq!(
        get(&one, "p.test", [127, 0, 0, 4]),
        429,
        "still blocked on one"
    );
}

/// `--store-sync`: a block started on one proxy is stored in Redis; the
/// other learns it at its next sync of the client's key (after it served
/// the client once: keys not served are not synced) and refuses it.
#[test]
fn a_block_reaches_the_other_proxy_through_store_sync() {
    let redis = Redis::start().expect("redis-server");
    let origin = Origin::start();
    let params = format!(
        "--key=ip --rate=1 --burst=1 --queue=0 --block=5 --prefix=blk --tag=synced \
         --store={} --store-sync=100",
        redis.url()
    );
    let start = || {
        TrafficServer::builder()
            .remap(rule("y.test", &origin, &params))
            .with_manager()
            .start()
            .expect("start")
    };
    let (one, two) = (start(), start());
    assert_eq!(get(&one, "y.test", A), 200);
    assert_eq!(get(&one, "y.test", A), 429, "over its rate on one: blocked");
    let started = Instant::now();
    // Past the refill (and the others' hit), two learns the block at its
    // first sync of A's key, which serving A once makes it do. One request
    // only: a refusal on two would start a block of its own.
    sleep(Duration::from_millis(1500));
    assert_eq!(get(&two, "y.test", A), 200, "not synced yet");
    let learned = ats_tests::wait_until(Duration::from_secs(3), || {
        let a = json(&two.plugin_msg("rate_limit", "key synced 127.0.0.2"));
        a["blocked_ms"].as_u64().unwrap_or(0) > 0
    });
    assert!(learned, "two never learned the block");
    assert_eq!(get(&two, "y.test", A), 429, "refused by the block on two");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "within the block"
    );
    assert_eq!(get(&two, "y.test", B), 200, "another client is served");
    assert_eq!(two.wait_metric("blk.remap.synced.blocked", 1), Ok(1));
    assert_eq!(
        two.metric("blk.remap.synced.blocks"),
        Some(0),
        "not a block of two's own"
    );
    sleep(Duration::from_secs(5).saturating_sub(started.elapsed()) + Duration::from_millis(500));
    assert!(
        ats_tests::wait_until(Duration::from_secs(3), || get(&two, "y.test", A) == 200),
        "the block is over on two"
    );
}
