//! HTTP/2 over TLS against a real traffic_server: many streams of one
//! connection through rate_limit.so's queue (`--conntrack`, `--maxage`,
//! `--fair=session`), RST_STREAM and connection close while streams wait,
//! and ip_throttle's `--max-concurrent` with one IP's streams. The client
//! is tests/h2/client.py (python3-h2), scripted per connection.

use std::thread;
use std::time::Duration;

use ats_tests::h2::{self, await_signal, close, send, send_with, signal, sleep_ms, wait};
use ats_tests::{wait_until, Origin, TrafficServer};

const HOST: &str = "a.test";

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        .tls()
        .with_manager()
        .start()
        .expect("traffic_server start")
}

fn rate_limit(origin: &Origin, params: &str) -> String {
    h2::rule("rate_limit", HOST, origin, params)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// rate_limit's live `active` and `waiting` of the limiter tagged `tag`.
fn live(ts: &TrafficServer, tag: &str) -> (i64, i64) {
    let v = json(&ts.plugin_msg("rate_limit", &format!("show {tag}")));
    let l = &v["limiters"][0];
    (
        l["active"].as_i64().unwrap_or(-1),
        l["waiting"].as_i64().unwrap_or(-1),
    )
}

/// Waits until the limiter holds and queues nothing: no slot leaked, no
/// queue place left behind.
fn assert_drained(ts: &TrafficServer, tag: &str) {
    let mut last = (-1, -1);
    let drained = wait_until(Duration::from_secs(5), || {
        last = live(ts, tag);
        last == (0, 0)
    });
    assert!(drained, "active, waiting = {last:?}, not (0, 0)");
}

/// A connection opens 5 streams while another connection holds the only
/// slot (`--conntrack`): its first stream waits for the slot and the
/// other four wait with it; all five pass when the holder closes.
#[test]
fn conntrack_streams_of_a_waiting_connection_pass_with_it() {
    let origin = Origin::start();
    let ts = start(rate_limit(
        &origin,
        "--conntrack --limit=1 --queue=10 --maxage=10000 --tag=ct",
    ));
    let hold_ms = 1500;
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![
            vec![
                send(5, "/a"),
                wait(5),
                signal("a"),
                sleep_ms(hold_ms),
                close(),
            ],
            vec![await_signal("a"), send(5, "/b"), wait(5)],
        ],
    );
    let (a, b) = (&conns[0], &conns[1]);
    assert_eq!((&a.error, &b.error), (&None, &None));
    assert_eq!(a.statuses(), [200; 5], "{a:?}");
    assert_eq!(b.statuses(), [200; 5], "{b:?}");
    // B's streams waited for A to close, then passed together.
    let a_done = a.streams.iter().filter_map(|s| s.t_ms).max().unwrap_or(0);
    let b_times: Vec<u64> = b.streams.iter().filter_map(|s| s.t_ms).collect();
    let (first, last) = (
        b_times.iter().min().copied().unwrap_or(0),
        b_times.iter().max().copied().unwrap_or(0),
    );
    assert!(
        first >= a_done + hold_ms - 300,
        "B answered at {first} ms, before A closed (~{} ms)",
        a_done + hold_ms
    );
    assert!(
        last - first < 2000,
        "B's streams passed together: {b_times:?}"
    );
    assert_eq!(origin.count(), 10);
    assert_drained(&ts, "ct");
}
