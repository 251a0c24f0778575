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

/// `--conntrack`: the connection's first waiting stream expires
/// (`--maxage`) while its later streams still wait. The connection keeps
/// its place through them: the next of its streams takes the slot when
/// the holder closes, and the rest pass with it.
#[test]
fn conntrack_first_stream_expiring_hands_the_wait_to_the_next() {
    let origin = Origin::start();
    let ts = start(rate_limit(
        &origin,
        "--conntrack --limit=1 --queue=10 --maxage=2000 --tag=ct2",
    ));
    // B's first stream expires at ~2000 ms, ~1000 ms before the holder
    // closes (~3000), which is ~800 ms before its later streams would
    // (~3800): roomy on a loaded CI machine.
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![
            vec![send(1, "/a"), wait(1), signal("a"), sleep_ms(3000), close()],
            vec![
                await_signal("a"),
                send(1, "/b"),
                sleep_ms(1800),
                send(4, "/b"),
                wait(5),
            ],
        ],
    );
    let b = &conns[1];
    assert_eq!(b.error, None);
    assert_eq!(b.statuses(), [429, 200, 200, 200, 200], "{b:?}");
    assert_eq!(origin.count(), 5);
    assert_eq!(counter(&ts, "ct2", "expired", 1), 1);
    assert_drained(&ts, "ct2");
}

/// `--conntrack`: the connection's first waiting stream is reset
/// (RST_STREAM); at its turn it is skipped, and the slot goes to the
/// connection's next stream, with which the others pass.
#[test]
fn conntrack_first_stream_reset_hands_the_wait_to_the_next() {
    let origin = Origin::start();
    let ts = start(rate_limit(
        &origin,
        "--conntrack --limit=1 --queue=10 --tag=ct3",
    ));
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![
            vec![send(1, "/a"), wait(1), signal("a"), sleep_ms(1000), close()],
            vec![
                await_signal("a"),
                send(1, "/b"),
                sleep_ms(200),
                send(3, "/b"),
                sleep_ms(200),
                h2::reset(&[0]),
                wait(4),
            ],
        ],
    );
    let b = &conns[1];
    assert_eq!(b.error, None);
    assert_eq!(b.statuses(), [0, 200, 200, 200], "{b:?}");
    assert_eq!(origin.count(), 4);
    assert_eq!(counter(&ts, "ct3", "abandoned", 1), 1);
    assert_drained(&ts, "ct3");
}

/// Waits until the rule's counter `name` (`abandoned`, `expired`, ...) in
/// `show` reads `want` (it reads the metric, which may lag a little);
/// returns the last value read.
fn counter(ts: &TrafficServer, tag: &str, name: &str, want: i64) -> i64 {
    let mut last = -1;
    wait_until(Duration::from_secs(12), || {
        let v = json(&ts.plugin_msg("rate_limit", &format!("show {tag}")));
        last = v["limiters"][0]["rules"][0][name].as_i64().unwrap_or(-1);
        last == want
    });
    last
}

fn origin_paths(origin: &Origin) -> Vec<String> {
    let mut p: Vec<String> = origin.requests().into_iter().map(|r| r.path).collect();
    p.sort();
    p
}

/// RST_STREAM on two queued streams: they never reach the origin and take
/// no slot; the stream queued behind them gets the slot the moment the
/// holder ends. (ATS does not tell a plugin about a stream reset while the
/// transaction is parked: the reset waiter keeps its queue place until its
/// turn, then is skipped as abandoned, or until `--maxage`.)
#[test]
fn rst_stream_of_queued_streams_passes_their_turn_on() {
    let origin = Origin::start();
    let ts = start(rate_limit(&origin, "--limit=1 --queue=10 --tag=rst"));
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![vec![
            send_with(1, "/hold", &[("X-Origin-Delay", "1500")]),
            sleep_ms(200),
            send(3, "/q"),
            sleep_ms(200),
            h2::reset(&[1, 2]),
            wait(4),
        ]],
    );
    let c = &conns[0];
    assert_eq!(c.error, None);
    assert_eq!(c.statuses(), [200, 0, 0, 200], "{c:?}");
    let (hold, last) = (
        c.streams[0].t_ms.unwrap_or(0),
        c.streams[3].t_ms.unwrap_or(0),
    );
    assert!(
        last >= hold && last - hold < 500,
        "the last waiter passed {} ms after the holder ended",
        last.saturating_sub(hold)
    );
    assert_eq!(origin_paths(&origin), ["/hold0", "/q3"]);
    assert_eq!(counter(&ts, "rst", "abandoned", 2), 2);
    assert_drained(&ts, "rst");
}

/// A connection closed while three of its streams wait: they leave the
/// queue within about a second (the check for departed clients), before
/// the slot frees, and another connection's waiter is next.
#[test]
fn connection_closed_while_streams_wait_leaves_the_queue() {
    let origin = Origin::start();
    let ts = start(rate_limit(&origin, "--limit=1 --queue=10 --tag=cls"));
    let port = ts.tls_port();
    let run = thread::spawn(move || {
        h2::run(
            port,
            HOST,
            20,
            vec![
                vec![
                    send_with(1, "/hold", &[("X-Origin-Delay", "3500")]),
                    signal("held"),
                    wait(1),
                ],
                vec![
                    await_signal("held"),
                    sleep_ms(200),
                    send(3, "/q"),
                    sleep_ms(300),
                    close(),
                ],
                vec![
                    await_signal("held"),
                    sleep_ms(400),
                    send(1, "/late"),
                    wait(1),
                ],
            ],
        )
    });
    // Before the holder ends (3.5 s): only the late waiter is left.
    let mut seen = (-1, -1);
    let left = wait_until(Duration::from_millis(2800), || {
        seen = live(&ts, "cls");
        seen == (1, 1)
    });
    let conns = run.join().expect("h2 client");
    assert!(
        left,
        "active, waiting = {seen:?}, not (1, 1) after the close"
    );
    assert_eq!(conns[0].statuses(), [200]);
    assert_eq!(
        conns[1].statuses(),
        [0, 0, 0],
        "no answer on a closed connection"
    );
    assert_eq!(conns[2].statuses(), [200]);
    assert_eq!(origin_paths(&origin), ["/hold0", "/late0"]);
    assert_eq!(counter(&ts, "cls", "abandoned", 3), 3);
    assert_drained(&ts, "cls");
}

/// `--maxage` is per stream: on one connection, a stream queued early
/// expires (429) while one queued later still gets the slot in time.
#[test]
fn maxage_expires_each_stream_on_its_own() {
    let origin = Origin::start();
    let ts = start(rate_limit(
        &origin,
        "--limit=1 --queue=10 --maxage=2000 --tag=age",
    ));
    // The early stream expires at ~2200 ms, before the late one is sent
    // (~2800), which gets the slot at ~4000, ~800 ms before its --maxage.
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![vec![
            send_with(1, "/hold", &[("X-Origin-Delay", "4000")]),
            sleep_ms(200),
            send(1, "/early"),
            sleep_ms(2600),
            send(1, "/late"),
            wait(3),
        ]],
    );
    let c = &conns[0];
    assert_eq!(c.error, None);
    assert_eq!(c.statuses(), [200, 429, 200], "{c:?}");
    let early = c.streams[1].t_ms.unwrap_or(0);
    assert!(
        (2100..3600).contains(&early),
        "the early stream expired at {early} ms (queued at ~200, --maxage 2000)"
    );
    assert!(c.streams[2].t_ms.unwrap_or(0) >= c.streams[0].t_ms.unwrap_or(0));
    assert_eq!(counter(&ts, "age", "expired", 1), 1);
    assert_drained(&ts, "age");
}

/// `--fair=session`: one HTTP/2 connection is one flow, however many
/// streams it opens. With `--flow-slots=2 --strict` its 6 streams run 2
/// at a time (in 3 waves), and another connection's streams take the
/// other slots at once instead of queueing behind them.
#[test]
fn fair_session_counts_one_connections_streams_as_one_flow() {
    let origin = Origin::start();
    let ts = start(rate_limit(
        &origin,
        "--limit=4 --queue=20 --fair=session --flow-slots=2 --strict --tag=fair",
    ));
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![
            vec![
                send_with(6, "/a", &[("X-Origin-Delay", "600")]),
                signal("sent"),
                wait(6),
            ],
            vec![
                await_signal("sent"),
                sleep_ms(100),
                send_with(2, "/c", &[("X-Origin-Delay", "600")]),
                wait(2),
            ],
        ],
    );
    let (a, c) = (&conns[0], &conns[1]);
    assert_eq!(a.statuses(), [200; 6], "{a:?}");
    assert_eq!(c.statuses(), [200; 2], "{c:?}");
    // At the origin, A never had more than 2 requests at once.
    let reqs = origin.requests();
    let most_of = |prefix: &str| {
        let mine: Vec<_> = reqs.iter().filter(|r| r.path.starts_with(prefix)).collect();
        mine.iter()
            .map(|r| {
                mine.iter()
                    .filter(|o| o.arrived <= r.arrived && o.finished.is_none_or(|f| f > r.arrived))
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    assert_eq!(most_of("/a"), 2, "A's streams at once");
    assert_eq!(most_of("/c"), 2, "C's streams at once");
    // C waited for none of A's waves.
    let c_last = c.streams.iter().filter_map(|s| s.t_ms).max().unwrap_or(0);
    let a_last = a.streams.iter().filter_map(|s| s.t_ms).max().unwrap_or(0);
    assert!(c_last < 1300, "C answered at {c_last} ms");
    assert!(a_last >= 1700, "A's third wave ended at {a_last} ms");
    assert_drained(&ts, "fair");
}

/// ip_throttle `--max-concurrent` counts the streams of one IP: of 5
/// streams sent at once by a throttled IP, 2 wait their delay and pass,
/// 3 are refused at once with 503.
#[test]
fn ip_throttle_max_concurrent_counts_streams_of_one_ip() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(h2::rule(
            "ip_throttle",
            HOST,
            &origin,
            "--initial-delay=1 --max-delay=1 --threshold=10 --ban-threshold=100 --max-concurrent=2",
        ))
        .tls()
        .start()
        .expect("start");
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![vec![send(1, "/first"), wait(1), send(5, "/b"), wait(6)]],
    );
    let c = &conns[0];
    assert_eq!(c.error, None);
    assert_eq!(c.statuses()[0], 200);
    let sent_at = c.streams[0].t_ms.unwrap_or(0);
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for s in &c.streams[1..] {
        let after = s.t_ms.unwrap_or(0).saturating_sub(sent_at);
        match s.status {
            Some(200) => ok.push(after),
            Some(503) => refused.push(after),
            other => panic!("{}: {other:?}", s.path),
        }
    }
    assert_eq!((ok.len(), refused.len()), (2, 3), "{c:?}");
    assert!(
        ok.iter().all(|&t| (950..2000).contains(&t)),
        "delayed ~1 s: {ok:?}"
    );
    assert!(
        refused.iter().all(|&t| t < 500),
        "refused at once: {refused:?}"
    );
    assert_eq!(origin.count(), 3);
}

/// throttle.so over HTTP/2: it has no queue; a stream over `max` gets 503
/// at once, and each stream gives its place back when it closes, though
/// the connection stays open.
#[test]
fn throttle_places_are_per_stream() {
    let origin = Origin::start();
    let remap = format!(
        "map https://{HOST}/ {} @plugin={} @pparam=max:2\n",
        origin.url(),
        ats_tests::plugin("throttle")
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .tls()
        .start()
        .expect("start");
    let conns = h2::run(
        ts.tls_port(),
        HOST,
        20,
        vec![vec![
            send_with(5, "/a", &[("X-Origin-Delay", "800")]),
            wait(5),
            send(2, "/b"),
            wait(7),
        ]],
    );
    let c = &conns[0];
    assert_eq!(c.error, None);
    let first: Vec<u16> = c.statuses()[..5].to_vec();
    assert_eq!(first.iter().filter(|&&s| s == 200).count(), 2, "{c:?}");
    assert_eq!(first.iter().filter(|&&s| s == 503).count(), 3, "{c:?}");
    assert_eq!(
        &c.statuses()[5..],
        [200, 200],
        "places given back per stream"
    );
}
