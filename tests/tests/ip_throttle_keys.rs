//! ip_throttle.so's per-key views (issue 33) against a real traffic_server
//! under traffic_manager: `keys [N]` lists the hottest IPs in the
//! documented order (banned, throttled by violations, probation most
//! recent first) with their state; `key IP` answers as `show IP`, also
//! for an IP never seen ("not held"); bad commands are answered with
//! what was wrong, and traffic_server keeps serving.
//!
//! Clients bind their own loopback sources (127.0.0.70 and up here).

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};
use serde_json::Value;

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn get(port: u16, src: Ipv4Addr) -> u16 {
    let mut c = Conn::open_from(port, src).expect("connect");
    c.get("k.test", "/", &[]).expect("response").status
}

fn json(answer: &str) -> Value {
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

fn ctl(ts: &TrafficServer, command: &str) -> Value {
    json(&ts.plugin_msg("ip_throttle", command))
}

/// Delays of 10 s, long enough to look at the IPs while they wait; the
/// fourth request of an IP bans it (violation 2 > 1).
const PARAMS: &str = "--initial-delay=10 --max-delay=10 --threshold=120 --ban-threshold=1 \
                      --ban-expiration=600 --max-concurrent=5 --instance=keys1";

/// A field of each listed IP.
fn column(keys: &Value, field: &str) -> Vec<Value> {
    keys["ips"]
        .as_array()
        .map(|a| a.iter().map(|v| v[field].clone()).collect())
        .unwrap_or_default()
}

#[test]
fn keys_lists_the_hottest_ips_in_order_and_key_answers_as_show() {
    let origin = Origin::start();
    let mut ts = TrafficServer::builder()
        .remap(ats_tests::rule("ip_throttle", "k.test", &origin, PARAMS))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    let (banned, two, one, older, newer) = (ip(70), ip(71), ip(72), ip(73), ip(74));
    // Each IP's first request passes and puts it in probation.
    for src in [banned, two, one, older, newer] {
        assert_eq!(get(port, src), 200);
    }
    // Then, at once: three from `banned` (delayed, delayed, the ban), two
    // from `two` (violations 0 and 1) and one from `one` (violations 0).
    // The delayed ones are answered after 10 s: they are looked at meanwhile.
    let sends: Vec<(Ipv4Addr, usize)> = vec![(banned, 3), (two, 2), (one, 1)];
    let started = Instant::now();
    let waiting: Vec<_> = sends
        .iter()
        .flat_map(|&(src, n)| (0..n).map(move |_| thread::spawn(move || get(port, src))))
        .collect();
    // Until every request has reached the plugin: the ban answered, and
    // the two IPs throttled with their violations.
    let deadline = Instant::now() + Duration::from_secs(8);
    let keys = loop {
        let k = ctl(&ts, "keys");
        let v = column(&k, "violations");
        let s = column(&k, "state");
        if (s.first() == Some(&Value::from("banned"))
            && v.get(1) == Some(&Value::from(1))
            && v.get(2) == Some(&Value::from(0)))
            || Instant::now() > deadline
        {
            break k;
        }
        thread::sleep(Duration::from_millis(200));
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "looked at while the delays last"
    );
    assert_eq!(keys["ok"], true, "{keys}");
    assert_eq!(keys["n"], 20);
    let ips: Vec<String> = column(&keys, "ip")
        .iter()
        .map(|v| v.as_str().unwrap_or("?").to_owned())
        .collect();
    assert_eq!(
        ips,
        [
            "127.0.0.70",
            "127.0.0.71",
            "127.0.0.72",
            "127.0.0.74",
            "127.0.0.73"
        ],
        "banned, throttled by violations, then probation most recent first: {keys}"
    );
    let states: Vec<Value> = column(&keys, "state");
    assert_eq!(
        states,
        ["banned", "throttled", "throttled", "probation", "probation"]
    );
    assert_eq!(column(&keys, "violations"), [2, 1, 0, 0, 0]);
    assert_eq!(column(&keys, "delay")[..3], ["10.000", "10.000", "10.000"]);
    assert!(column(&keys, "prefix").iter().all(|p| p == 32), "{keys}");
    assert!(column(&keys, "rule").iter().all(|r| r == "http.k.test"));
    for (i, v) in column(&keys, "remaining").iter().enumerate() {
        let secs: f64 = v.as_str().and_then(|s| s.parse().ok()).unwrap_or(-1.0);
        let most = [600.0, 20.0, 20.0, 120.0, 120.0][i];
        assert!(secs > 0.0 && secs <= most, "{i}: {secs} ({keys})");
    }
    let rule = &keys["rules"][0];
    assert_eq!(
        (&rule["rule"], &rule["instance"], &rule["keys"]),
        (
            &Value::from("http.k.test"),
            &Value::from("keys1"),
            &Value::from(5)
        ),
        "{keys}"
    );

    // N bounds the list; the order is the same.
    let first = json(&ts.plugin_msg("ip_throttle.keys", "2 keys1"));
    assert_eq!(
        column(&first, "ip"),
        ["127.0.0.70", "127.0.0.71"],
        "{first}"
    );

    // key IP: show IP's answer (the time left moves on between the two).
    let strip = |mut v: Value| {
        for r in v["rules"].as_array_mut().into_iter().flatten() {
            r["remaining"] = Value::Null;
        }
        v["rules"].take()
    };
    let key = ctl(&ts, "key 127.0.0.70");
    let show = ctl(&ts, "show 127.0.0.70");
    assert_eq!(key["ok"], true, "{key}");
    assert_eq!(key["rules"][0]["state"], "banned", "{key}");
    assert_eq!(strip(key), strip(show));
    let never = ctl(&ts, "key 127.0.0.99");
    assert_eq!(
        (
            &never["ok"],
            &never["ip"],
            &never["rules"][0]["tracked"],
            &never["rules"][0]["state"]
        ),
        (
            &Value::from(true),
            &Value::from("127.0.0.99"),
            &Value::from(false),
            &Value::from("allowed")
        ),
        "{never}"
    );
    assert!(
        ts.diags()
            .contains("ctl show: 127.0.0.99: not held (allowed) (1 rule(s))"),
        "the summary says not held"
    );

    // Bad commands: what was wrong, and nothing changes.
    for (command, error) in [
        (
            "keys 0",
            "keys: N has an invalid value '0': allowed 1 to 1000",
        ),
        (
            "keys 1001",
            "keys: N has an invalid value '1001': allowed 1 to 1000",
        ),
        (
            "keys 5 keys1 extra",
            "keys: wrong arguments '5 keys1 extra'",
        ),
        ("keys nosuch", "no rule named 'nosuch'"),
        ("key notanip", "key: 'notanip' is not an IP address"),
        ("key", "key: wrong arguments"),
    ] {
        let a = ctl(&ts, command);
        assert_eq!(a["ok"], false, "{command}: {a}");
        let e = a["error"].as_str().unwrap_or("");
        assert!(e.contains(error), "{command}: {e}");
    }
    assert_eq!(ctl(&ts, "key 127.0.0.70")["rules"][0]["state"], "banned");
    assert_eq!(get(port, ip(75)), 200, "traffic_server still serves");
    assert!(
        ts.is_running(),
        "traffic_server neither crashed nor restarted"
    );

    let mut statuses: Vec<u16> = waiting
        .into_iter()
        .map(|h| h.join().expect("request thread"))
        .collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 403],
        "one ban, five delays"
    );
}
