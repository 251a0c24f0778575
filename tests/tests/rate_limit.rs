//! rate_limit.so against a real traffic_server: every option, FIFO hand-off,
//! expiry, aborts, conntrack, rate, RateLimit headers, reload, and a
//! side-by-side comparison with upstream's rate_limit.so.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{self, Conn, GiveUp, Response};
use ats_tests::{Origin, TrafficServer};

/// How much sooner than its value a timer armed while handling a request
/// may end, as the client measures it: ATS counts from its thread's clock as
/// read before the poll that delivered the request (up to 60 ms,
/// `proxy.config.thread.max_heartbeat_mseconds`, plus 1 ms the timer drops),
/// rounded up for a thread kept from a CPU after its poll (see foundation.rs).
const TIMER_EARLY: Duration = Duration::from_millis(100);

/// Upstream's rate_limit.so of the Traffic Server under test (`ATS_PREFIX`).
fn upstream() -> String {
    ats_tests::ats::upstream_plugin("rate_limit")
}

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("traffic_server start")
}

fn counts(results: &[std::io::Result<Response>]) -> BTreeMap<u16, usize> {
    client::status_counts(results)
}

/// `n` requests at once to `host` with the given origin delay; `X-Req` = index.
fn storm(
    ts: &TrafficServer,
    host: &'static str,
    n: usize,
    delay_ms: u64,
) -> Vec<std::io::Result<Response>> {
    staggered_storm(ts, host, n, delay_ms, 0)
}

/// `storm`, with request `i` sent `stagger_ms * i` ms after the first.
fn staggered_storm(
    ts: &TrafficServer,
    host: &'static str,
    n: usize,
    delay_ms: u64,
    stagger_ms: u64,
) -> Vec<std::io::Result<Response>> {
    let port = ts.port();
    client::burst(n, move |i| {
        thread::sleep(Duration::from_millis(stagger_ms * i as u64));
        client::get(
            port,
            host,
            &format!("/s{i}"),
            &[
                ("X-Origin-Delay", &delay_ms.to_string()),
                ("X-Req", &i.to_string()),
            ],
        )
    })
}

#[test]
fn limit_without_queue_rejects_the_excess_with_the_error_page() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=2 --queue=0 --retry=7"));
    let results = storm(&ts, "a.test", 6, 600);
    assert_eq!(counts(&results), BTreeMap::from([(200, 2), (429, 4)]));
    assert!(origin.max_in_flight() <= 2);
    let rejected: Vec<&Response> = results
        .iter()
        .flatten()
        .filter(|r| r.status == 429)
        .collect();
    for r in &rejected {
        assert_eq!(r.header("Retry-After"), Some("7"));
        assert_eq!(r.header("Cache-Control"), Some("no-store"));
        assert!(
            r.body_text().contains("<HTML>"),
            "body-factory page expected: {:?}",
            r.body_text()
        );
        assert!(
            r.elapsed < Duration::from_millis(400),
            "rejection must be immediate: {:?}",
            r.elapsed
        );
    }
    assert_eq!(
        origin.count(),
        2,
        "rejected requests must not reach the origin"
    );
}

#[test]
fn custom_error_status_and_no_retry_after_by_default() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1 --queue=0 --error=503"));
    let results = storm(&ts, "a.test", 3, 500);
    assert_eq!(counts(&results), BTreeMap::from([(200, 1), (503, 2)]));
    for r in results.iter().flatten().filter(|r| r.status == 503) {
        assert_eq!(r.header("Retry-After"), None);
    }
}

#[test]
fn queued_transactions_resume_in_fifo_order_as_slots_free() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1 --header=X-Queue-Delay"));
    let port = ts.port();
    // The slot holder, then 5 more arriving 40 ms apart: a known arrival order.
    let mut handles = Vec::new();
    for i in 0..6u64 {
        let delay = if i == 0 { "300" } else { "30" };
        handles.push(thread::spawn(move || {
            client::get(
                port,
                "a.test",
                &format!("/f{i}"),
                &[("X-Origin-Delay", delay), ("X-Req", &i.to_string())],
            )
        }));
        thread::sleep(Duration::from_millis(40));
    }
    for h in handles {
        assert_eq!(h.join().expect("thread").expect("request").status, 200);
    }
    let seen: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| r.header("X-Req").unwrap_or("?").to_owned())
        .collect();
    assert_eq!(seen, ["0", "1", "2", "3", "4", "5"], "FIFO order");
    assert_eq!(origin.max_in_flight(), 1);
    // The delay header: absent on the first, a plausible number of ms on the queued ones.
    let reqs = origin.requests();
    assert_eq!(reqs[0].header("X-Queue-Delay"), None);
    let waited: Vec<u64> = reqs[1..]
        .iter()
        .map(|r| {
            r.header("X-Queue-Delay")
                .and_then(|v| v.parse().ok())
                .expect("delay header")
        })
        .collect();
    // Request 1 arrived ~40 ms after the holder, which needs 300 ms.
    assert!((150..=600).contains(&waited[0]), "{waited:?}");
    assert!(waited.windows(2).all(|w| w[1] + 100 >= w[0]), "{waited:?}");
}

#[test]
fn a_freed_slot_goes_to_the_queue_head_at_once() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1"));
    let port = ts.port();
    let holder =
        thread::spawn(move || client::get(port, "a.test", "/h", &[("X-Origin-Delay", "200")]));
    thread::sleep(Duration::from_millis(50));
    let queued = client::get(port, "a.test", "/q", &[]).expect("queued request");
    holder.join().expect("thread").expect("holder");
    assert_eq!(queued.status, 200);
    let reqs = origin.requests();
    let (h, q) = (&reqs[0], &reqs[1]);
    // From the holder's response leaving the origin to the queued request
    // arriving there: the slot hand-off plus one proxy hop. Upstream sweeps every 200-300 ms.
    let gap = q
        .arrived
        .duration_since(h.finished.expect("holder finished"));
    assert!(gap < Duration::from_millis(50), "resume took {gap:?}");
}

#[test]
fn maxage_expires_waiters_on_time_even_when_no_slot_frees() {
    let origin = Origin::start();
    let ts = start(rule(
        "a.test",
        &origin,
        "--limit=1 --maxage=300 --retry=2 --header=X-Queue-Delay",
    ));
    let port = ts.port();
    let holder =
        thread::spawn(move || client::get(port, "a.test", "/h", &[("X-Origin-Delay", "2500")]));
    thread::sleep(Duration::from_millis(100));
    let results = client::burst(3, move |i| {
        client::get(port, "a.test", &format!("/w{i}"), &[])
    });
    for r in &results {
        let r = r.as_ref().expect("request");
        assert_eq!(r.status, 429);
        assert!(
            r.elapsed >= Duration::from_millis(300) - TIMER_EARLY,
            "expired too early: {:?}",
            r.elapsed
        );
        assert!(
            r.elapsed < Duration::from_millis(1200),
            "expired too late: {:?}",
            r.elapsed
        );
        assert_eq!(r.header("Retry-After"), Some("2"));
        assert_eq!(r.header("Cache-Control"), Some("no-store"));
    }
    assert_eq!(holder.join().expect("thread").expect("holder").status, 200);
    assert_eq!(origin.count(), 1);
}

#[test]
fn maxage_with_traffic_serves_who_fits_and_expires_the_rest() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1 --maxage=500"));
    // Each request holds the slot 200 ms: within 500 ms the head gets served, the tail expires.
    let results = storm(&ts, "a.test", 6, 200);
    let c = counts(&results);
    let served = c.get(&200).copied().unwrap_or(0);
    assert!((2..=4).contains(&served), "{c:?}");
    assert_eq!(served + c.get(&429).copied().unwrap_or(0), 6, "{c:?}");
    assert_eq!(origin.max_in_flight(), 1);
}

#[test]
fn queue_bound_rejects_beyond_the_queue() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=2 --queue=2"));
    let results = storm(&ts, "a.test", 7, 400);
    assert_eq!(counts(&results), BTreeMap::from([(200, 4), (429, 3)]));
}

#[test]
fn slots_come_back_after_client_aborts_while_active_and_while_queued() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("a.test", &origin, "--limit=2 --prefix=t --tag=abort"))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    // 2 active clients and 4 queued ones all give up: some with RST, some with FIN.
    let aborters: Vec<_> = (0..6)
        .map(|i| {
            thread::spawn(move || {
                let how = if i % 2 == 0 {
                    GiveUp::Reset
                } else {
                    GiveUp::Fin
                };
                Conn::open(port).expect("connect").give_up_after(
                    "a.test",
                    &format!("/ab{i}"),
                    &[("X-Origin-Delay", "800")],
                    Duration::from_millis(150),
                    how,
                )
            })
        })
        .collect();
    for a in aborters {
        a.join().expect("thread").expect("abort");
    }
    // The two that reached the origin finish there (ATS may keep filling); then
    // the queued ones must not take slots: new requests get through promptly.
    thread::sleep(Duration::from_millis(1000));
    let start = Instant::now();
    let results = client::burst(2, move |i| {
        client::get(port, "a.test", &format!("/after{i}"), &[])
    });
    assert_eq!(counts(&results), BTreeMap::from([(200, 2)]));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // Only the two active ones ever reached the origin (plus the two after).
    let reached: Vec<String> = origin.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        reached.iter().filter(|p| p.starts_with("/ab")).count(),
        2,
        "{reached:?}"
    );
    // Every slot and queue place came back. A 0 means that only once the
    // counters bumped after the last increments (4 admitted: 2 aborted + 2
    // after; 4 abandoned) are visible: before that, an unsynced gauge reads 0 too.
    assert_eq!(
        ts.wait_metrics_after(
            &[
                ("t.remap.abort.admitted", 4),
                ("t.remap.abort.abandoned", 4)
            ],
            &[("t.remap.abort.active", 0), ("t.remap.abort.waiting", 0)],
        ),
        Ok(())
    );
}

#[test]
fn conntrack_limits_connections_not_transactions() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1 --queue=0 --conntrack"));
    let port = ts.port();
    let mut a = Conn::open(port).expect("connect");
    for i in 0..5 {
        assert_eq!(
            a.get("a.test", &format!("/ka{i}"), &[])
                .expect("keep-alive request")
                .status,
            200
        );
    }
    // A second connection is refused while the first holds the slot...
    let mut b = Conn::open(port).expect("connect");
    assert_eq!(b.get("a.test", "/kb0", &[]).expect("request").status, 429);
    // ...and, unlike upstream, a refused connection is not let through on its next request.
    assert_eq!(b.get("a.test", "/kb1", &[]).expect("request").status, 429);
    // Closing the first connection frees the slot.
    drop(a);
    let ok = ats_tests::wait_until(Duration::from_secs(5), || {
        client::get(port, "a.test", "/kc", &[])
            .map(|r| r.status == 200)
            .unwrap_or(false)
    });
    assert!(ok, "slot not released at session close");
}

#[test]
fn rate_limits_admissions_to_rate_times_t_plus_burst() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--rate=10 --burst=5 --queue=0"));
    let port = ts.port();
    let mut conn = Conn::open(port).expect("connect");
    let mut first = None;
    let mut last = Instant::now();
    let (mut ok, mut refused) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < end {
        let r = conn.get("a.test", "/r", &[]).expect("request");
        first.get_or_insert(r.sent_at);
        last = r.sent_at;
        match r.status {
            200 => ok += 1,
            429 => refused += 1,
            s => panic!("unexpected status {s}"),
        }
        thread::sleep(Duration::from_millis(3));
    }
    // Between the first and the last request the bucket admits its burst plus
    // one per whole 1/rate elapsed; ±1 for where the last refill falls (the
    // client's send times are not the proxy's decision times). A fractional
    // expectation (e.g. 30.004 for 2.5004 s) would make 29 fail by 0.004.
    let t = last
        .duration_since(first.expect("requests were sent"))
        .as_secs_f64();
    let expected = 5.0 + (10.0 * t).floor();
    assert!(
        (ok as f64 - expected).abs() <= 1.0,
        "admitted {ok} over {t:.3}s, expected {expected:.2} ± 1"
    );
    assert!(refused > 0);
}

#[test]
fn slow_rates_work_and_the_bucket_starts_full() {
    let origin = Origin::start();
    // Upstream's refill is zero below 40/s and its bucket starts empty.
    let ts = start(rule("a.test", &origin, "--rate=2 --burst=2 --queue=0"));
    assert_eq!(ts.get("a.test", "/1", &[]).expect("request").status, 200);
    assert_eq!(ts.get("a.test", "/2", &[]).expect("request").status, 200);
    assert_eq!(ts.get("a.test", "/3", &[]).expect("request").status, 429);
    thread::sleep(Duration::from_millis(550));
    assert_eq!(ts.get("a.test", "/4", &[]).expect("request").status, 200);
}

#[test]
fn over_rate_requests_wait_in_the_queue_when_allowed() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--rate=5 --burst=1 --maxage=2000"));
    let port = ts.port();
    let start = Instant::now();
    let results = client::burst(5, move |i| {
        client::get(port, "a.test", &format!("/d{i}"), &[])
    });
    let mut times: Vec<Duration> = results
        .iter()
        .map(|r| r.as_ref().expect("request"))
        .map(|r| {
            assert_eq!(r.status, 200);
            r.elapsed
        })
        .collect();
    times.sort();
    assert!(times[4] < Duration::from_millis(1500), "{times:?}");
    // Spaced by the rate, none refused: with a bucket of 1 the k-th
    // admission is due k × 200 ms after the first, which came after `start`,
    // and its timer ends at most TIMER_EARLY sooner. Counted from `start`,
    // not from the previous arrival, whose hop to the origin may run late.
    let mut arrivals: Vec<Duration> = origin
        .requests()
        .iter()
        .map(|r| r.arrived.duration_since(start))
        .collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 5, "{arrivals:?}");
    for (k, at) in arrivals.iter().enumerate() {
        let due = Duration::from_millis(200 * k as u64).saturating_sub(TIMER_EARLY);
        assert!(*at >= due, "arrival {k} too soon: {arrivals:?}");
    }
}

#[test]
fn ratelimit_headers_describe_the_policy_and_what_is_left() {
    let origin = Origin::start();
    let ts = start(rule(
        "a.test",
        &origin,
        "--limit=3 --rate=10 --ratelimit-headers --queue=0",
    ));
    let r = ts.get("a.test", "/h", &[]).expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("RateLimit-Policy"),
        Some("\"concurrency\";q=3;qu=\"concurrent-requests\", \"rate\";q=10;w=1")
    );
    // While the response is being sent this request still holds its slot.
    assert_eq!(
        r.header("RateLimit"),
        Some("\"concurrency\";r=2, \"rate\";r=9;t=1")
    );
    let results = storm(&ts, "a.test", 5, 400);
    let refused: Vec<&Response> = results
        .iter()
        .flatten()
        .filter(|r| r.status == 429)
        .collect();
    assert_eq!(refused.len(), 2);
    for r in refused {
        assert!(
            r.header("RateLimit")
                .is_some_and(|v| v.starts_with("\"concurrency\";r=0")),
            "{:?}",
            r.header("RateLimit")
        );
    }
}

#[test]
fn at_headers_never_leave_ats_but_reach_the_log() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("a.test", &origin, "--limit=1 --header=@Queue-Delay"))
        .config_file(
            "logging.yaml",
            "logging:\n  formats:\n    - name: delay\n      format: '%<cquc> delay=%<{@Queue-Delay}cqh>'\n  \
             logs:\n    - filename: delays\n      format: delay\n      mode: ascii\n",
        )
        .start()
        .expect("start");
    let results = storm(&ts, "a.test", 3, 200);
    assert_eq!(counts(&results), BTreeMap::from([(200, 3)]));
    for r in origin.requests() {
        assert!(
            r.headers.iter().all(|(k, _)| !k.starts_with('@')),
            "an @ header reached the origin: {:?}",
            r.headers
        );
    }
    assert!(
        ts.wait_for_log("delays.log", Duration::from_secs(15), |l| l
            .lines()
            .filter(|l| l
                .split("delay=")
                .nth(1)
                .is_some_and(|v| v.trim().parse::<u64>().is_ok()))
            .count()
            == 2),
        "two queued transactions should log their delay: {}",
        ts.log("delays.log")
    );
}

#[test]
fn refusals_are_never_cached() {
    let origin = Origin::start();
    origin.set_default("X-Origin-CC", "max-age=60");
    let ts = start(rule("a.test", &origin, "--limit=1 --queue=0"));
    let port = ts.port();
    let holder =
        thread::spawn(move || client::get(port, "a.test", "/busy", &[("X-Origin-Delay", "500")]));
    thread::sleep(Duration::from_millis(100));
    assert_eq!(ts.get("a.test", "/page", &[]).expect("request").status, 429);
    holder.join().expect("thread").expect("holder");
    // The same URL, once the holder's transaction has closed: fetched from the
    // origin, not a cached 429.
    assert!(ats_tests::wait_until(Duration::from_secs(3), || ts
        .get("a.test", "/page", &[])
        .map(|r| r.status == 200)
        .unwrap_or(false)));
    assert!(origin.requests().iter().any(|r| r.path == "/page"));
}

#[test]
fn metrics_carry_upstream_names_and_counts() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("a.test", &origin, "--limit=1 --queue=1 --maxage=2000"))
        .with_manager()
        .start()
        .expect("start");
    // 1 admitted at once, 1 queued then resumed, 2 rejected (queue full).
    let results = storm(&ts, "a.test", 4, 400);
    assert_eq!(counts(&results), BTreeMap::from([(200, 2), (429, 2)]));
    let m = |name: &str| format!("plugin.rate_limiter.remap.http.a.test.{name}");
    // The non-zero counts first: they prove the metrics synced, so the zeros
    // after them are values and not a snapshot taken before the storm.
    let (queued, resumed, rejected, admitted) =
        (m("queued"), m("resumed"), m("rejected"), m("admitted"));
    let (expired, active, waiting) = (m("expired"), m("active"), m("waiting"));
    assert_eq!(
        ts.wait_metrics_after(
            &[(&queued, 1), (&resumed, 1), (&rejected, 2), (&admitted, 2)],
            &[(&expired, 0), (&active, 0), (&waiting, 0)],
        ),
        Ok(())
    );
    let listed =
        String::from_utf8_lossy(&ts.traffic_ctl(&["metric", "match", "rate_limiter"]).stdout)
            .into_owned();
    assert!(listed.contains(&m("queued")), "{listed}");
}

#[test]
fn a_departed_waiter_frees_its_queue_place_before_its_turn() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "--limit=1 --queue=2"));
    let port = ts.port();
    let holder =
        thread::spawn(move || client::get(port, "a.test", "/h", &[("X-Origin-Delay", "4000")]));
    thread::sleep(Duration::from_millis(100));
    // Two clients fill the queue, then give up.
    for i in 0..2 {
        Conn::open(port)
            .expect("connect")
            .give_up_after(
                "a.test",
                &format!("/gone{i}"),
                &[],
                Duration::from_millis(100),
                GiveUp::Fin,
            )
            .expect("close");
    }
    assert_eq!(
        ts.get("a.test", "/full", &[]).expect("request").status,
        429,
        "the queue should be full now"
    );
    // Within the watch period their places come back: two new clients can wait
    // (and are served when the holder finishes) instead of being refused.
    thread::sleep(Duration::from_millis(1500));
    let results = client::burst(2, move |i| {
        client::get(port, "a.test", &format!("/new{i}"), &[])
    });
    assert_eq!(counts(&results), BTreeMap::from([(200, 2)]));
    assert_eq!(holder.join().expect("thread").expect("holder").status, 200);
    assert!(origin
        .requests()
        .iter()
        .all(|r| !r.path.starts_with("/gone")));
}

#[test]
fn bad_options_refuse_the_rule_naming_option_value_and_allowed() {
    let origin = Origin::start();
    for (params, expect) in [
        (
            "--limit=abc",
            "--limit has an invalid value 'abc': allowed an integer from 1 to 4294967295 or auto",
        ),
        (
            "--error=302",
            "--error has an invalid value '302': allowed an integer from 400 to 599",
        ),
        (
            "--bogus=1",
            "unknown option '--bogus=1'; known options: --limit",
        ),
        ("--burst=3", "--burst needs --rate"),
        (
            "--rate=1 --enforce=101",
            "--enforce has an invalid value '101': allowed an integer from 0 to 100",
        ),
    ] {
        let err = TrafficServer::builder()
            .remap(rule("a.test", &origin, params))
            .start()
            .err()
            .unwrap_or_else(|| panic!("{params} must fail the rule"));
        assert!(err.diags.contains(expect), "{params}: {err:?}");
    }
}

#[test]
fn reload_under_load_lets_old_transactions_finish() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "a.test",
            &origin,
            "--limit=2 --prefix=rl --tag=reload",
        ))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    // 2 active + 4 queued on the old instance when the reload happens.
    let load = thread::spawn(move || {
        client::burst(6, move |i| {
            client::get(
                port,
                "a.test",
                &format!("/l{i}"),
                &[("X-Origin-Delay", "400")],
            )
        })
    });
    thread::sleep(Duration::from_millis(150));
    ts.reload_remap(&rule(
        "a.test",
        &origin,
        "--limit=5 --prefix=rl --tag=reload",
    ))
    .expect("reload");
    let results = load.join().expect("thread");
    assert_eq!(counts(&results), BTreeMap::from([(200, 6)]));
    assert!(origin.max_in_flight() <= 2 + 5);
    // The new instance serves with its own limit.
    let after = storm(&ts, "a.test", 5, 300);
    assert_eq!(counts(&after), BTreeMap::from([(200, 5)]));
    // Both instances share the metrics: 6 + 5 admitted, bumped after each
    // `active` (and queued `waiting`) increment, so once 11 is visible a 0 is real.
    assert_eq!(
        ts.wait_metrics_after(
            &[("rl.remap.reload.admitted", 11)],
            &[
                ("rl.remap.reload.active", 0),
                ("rl.remap.reload.waiting", 0)
            ],
        ),
        Ok(())
    );
    assert!(!ts.diags().contains("FATAL"));
}

/// The same scenarios through upstream's rate_limit.so and ours, side by side
/// in one traffic_server: the status counts must match where semantics do.
#[test]
fn same_status_counts_as_upstream_rate_limit() {
    let upstream = upstream();
    assert!(
        std::path::Path::new(&upstream).is_file(),
        "{upstream} missing: install trafficserver-experimental-plugins"
    );
    let origin = Origin::start();
    let scenarios = [
        ("--limit=2 --queue=0", 6, 400, [(200, 2), (429, 4)]),
        ("--limit=2 --queue=2", 7, 400, [(200, 4), (429, 3)]),
        (
            "--limit=3 --queue=0 --error=503",
            5,
            400,
            [(200, 3), (503, 2)],
        ),
    ];
    for (params, n, delay, expect) in scenarios {
        let pp: String = params
            .split_whitespace()
            .map(|p| format!(" @pparam={p}"))
            .collect();
        let remap = format!(
            "{}map http://upstream.test/ {} @plugin={upstream}{pp}\n",
            rule("ours.test", &origin, params),
            origin.url()
        );
        let ts = start(remap);
        // Arrivals 30 ms apart: upstream checks its queue bound at remap but
        // queues at POST_REMAP, so requests that arrive together can all
        // pass the check and overfill its queue (a CI run saw 5 queued under
        // `--queue=2`). Spaced, its answer is deterministic; ours is exact
        // either way (the other tests send true bursts).
        let ours = counts(&staggered_storm(&ts, "ours.test", n, delay, 30));
        let theirs = counts(&staggered_storm(&ts, "upstream.test", n, delay, 30));
        assert_eq!(
            ours, theirs,
            "{params}: ours {ours:?} vs upstream {theirs:?}"
        );
        assert_eq!(ours, BTreeMap::from(expect), "{params}");
    }
}

/// `active` (published every second from the rule's own counts) shows the
/// slots held, also those still held under a rule replaced by a reload,
/// and comes back to 0 when they are given back. The slots are held by
/// keep-alive connections (`--conntrack`), so the test decides when they
/// end, however slowly 9.2's metrics follow.
#[test]
fn active_shows_held_slots_across_a_reload_then_zero() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "a.test",
            &origin,
            "--conntrack --limit=10 --prefix=act --tag=live",
        ))
        .with_manager()
        .start()
        .expect("start");
    let mut holders: Vec<Conn> = (0..3)
        .map(|i| {
            let mut c = Conn::open(ts.port()).expect("connect");
            let r = c.get("a.test", &format!("/h{i}"), &[]).expect("GET");
            assert_eq!(r.status, 200);
            c
        })
        .collect();
    assert_eq!(ts.wait_metric("act.remap.live.active", 3), Ok(3));
    // The rule is replaced (other options, same metrics): the old rule's
    // held slots stay in `active` while the new rule publishes its own.
    ts.reload_remap(&rule(
        "a.test",
        &origin,
        "--conntrack --limit=9 --prefix=act --tag=live",
    ))
    .expect("reload");
    let r = client::get(ts.port(), "a.test", "/after", &[]).expect("GET");
    assert_eq!(r.status, 200);
    // Two publishing periods after the reload (on 9.2 also its sync lag, so
    // that what is read was published after the old rule was dropped), the
    // 3 are still counted: the connections still hold them.
    let settle = if ats_tests::ats::is_10() {
        2_500
    } else {
        11_000
    };
    thread::sleep(Duration::from_millis(settle));
    assert_eq!(ts.wait_metric("act.remap.live.active", 3), Ok(3));
    for c in &mut holders {
        let r = c
            .get("a.test", "/again", &[])
            .expect("GET on a held connection");
        assert_eq!(r.status, 200);
    }
    drop(holders);
    assert_eq!(
        ts.wait_metrics_after(
            &[("act.remap.live.admitted", 4)],
            &[("act.remap.live.active", 0)],
        ),
        Ok(())
    );
}
