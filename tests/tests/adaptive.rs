//! rate_limit.so's `--limit=auto` and throttle.so's `max:auto` (issue 34)
//! against a real traffic_server in front of an origin of capacity C = 8
//! with 50 ms of base latency (processor sharing beyond C): 40 closed-loop
//! clients. The learned limit keeps the origin's median in-flight near C
//! (between 4 and 16), serves at least half its capacity, shows in its
//! metrics and `show`, and `set` pins it and lets it learn again; throttle.so
//! still serves stale content while its learned max is full.

use std::thread;
use std::time::{Duration, Instant};

use ats_tests::capacity_origin::CapacityOrigin;
use ats_tests::closed_loop::ClosedLoop;
use ats_tests::TrafficServer;
use serde_json::Value;

const C: usize = 8;
const BASE: Duration = Duration::from_millis(50);
const CLIENTS: usize = 40;

fn json(answer: &str) -> Value {
    serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// After 10 s of learning (the start at 20, a probe at the minimum, then
/// the gradient), 15 s measured: the origin's median in flight (over its
/// arrivals) and its answers per second.
fn learn_then_measure(origin: &CapacityOrigin) -> (usize, f64) {
    thread::sleep(Duration::from_secs(10));
    let (t0, answered0) = (Instant::now(), origin.answered());
    thread::sleep(Duration::from_secs(15));
    let (secs, answered) = (t0.elapsed().as_secs_f64(), origin.answered() - answered0);
    let in_flight = origin.in_flight_since(t0);
    let median = in_flight.get(in_flight.len() / 2).copied().unwrap_or(0);
    (median, answered as f64 / secs)
}

/// Pins the learned limit with `command`: the most the origin held in the
/// 3 s after those admitted before it have left (1 s).
fn pinned_most(
    ts: &TrafficServer,
    origin: &CapacityOrigin,
    plugin: &str,
    command: &str,
) -> Option<usize> {
    let a = json(&ts.plugin_msg(plugin, command));
    assert_eq!(a["ok"], true, "{a}");
    thread::sleep(Duration::from_secs(1));
    let since = Instant::now();
    thread::sleep(Duration::from_secs(3));
    origin.in_flight_since(since).last().copied()
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
    let clients = ClosedLoop::start(ts.port(), "a.test", CLIENTS, Duration::ZERO, true);
    let (median, rate) = learn_then_measure(&origin);
    let shown = json(&ts.plugin_msg("rate_limit", "show learn"));
    // Pinned live: the origin holds at most that many from then on.
    let pinned_most = pinned_most(&ts, &origin, "rate_limit", "set learn limit=6");
    let n = clients.stop();
    let (ok, other) = (n.ok, n.refused + n.other);
    assert!(
        pinned_most.is_some_and(|n| n <= 6),
        "pinned at 6: {pinned_most:?} in flight"
    );
    let capacity = C as f64 / BASE.as_secs_f64();
    eprintln!(
        "median in flight {median}, {rate:.0} answers/s (capacity {capacity:.0}), \
         clients {ok} ok {other} not; show: {shown}"
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

/// throttle.so's `max:auto`: no queue, so the clients beyond the learned
/// max are answered 503 (and come back 10 ms later); a stale object is
/// served stale while the max is full, revalidated when it is not.
#[test]
fn throttle_learns_its_max_and_serves_stale_when_full() {
    let origin = CapacityOrigin::start(C, BASE);
    let remap = format!(
        "map http://t.test/ {} @plugin={} @pparam=max:auto @pparam=stale:60 @pparam=id:learn\n",
        origin.url(),
        ats_tests::plugin("throttle")
    );
    let mut ts = TrafficServer::builder()
        .remap(remap.clone())
        // Otherwise ATS itself may serve stale content when revalidation fails.
        .record("proxy.config.http.negative_revalidating_enabled", "INT 0")
        .with_manager()
        .start()
        .expect("start");
    // In cache before the load (stale from the start: max-age=0).
    let r = ts.get("t.test", "/cacheable", &[]).expect("fill");
    assert_eq!(r.status, 200);
    let clients = ClosedLoop::start(
        ts.port(),
        "t.test",
        CLIENTS,
        Duration::from_millis(10),
        true,
    );
    let (median, rate) = learn_then_measure(&origin);
    // The stale object, while the clients keep the learned max full.
    let stale: Vec<(u16, bool)> = (0..20)
        .map(|_| {
            thread::sleep(Duration::from_millis(100));
            let r = ts.get("t.test", "/cacheable", &[]).expect("stale request");
            (r.status, r.header("Warning").is_some())
        })
        .collect();
    let shown = json(&ts.plugin_msg("throttle", "show learn"));
    let a = json(&ts.plugin_msg("throttle", "set learn max=0"));
    assert!(
        a["error"]
            .as_str()
            .is_some_and(|e| e.contains("a pinned max is at least 1")),
        "{a}"
    );
    let pinned_most = pinned_most(&ts, &origin, "throttle", "set learn max=6");
    let n = clients.stop();
    let (ok, refused) = (n.ok, n.refused);
    let capacity = C as f64 / BASE.as_secs_f64();
    eprintln!(
        "median in flight {median}, {rate:.0} answers/s (capacity {capacity:.0}), clients \
         {ok} ok {refused} refused, stale requests {stale:?}; show: {shown}"
    );
    assert!((4..=16).contains(&median), "median in flight {median}");
    assert!(rate >= capacity / 2.0, "{rate:.0} answers/s");
    assert!(
        pinned_most.is_some_and(|n| n <= 6),
        "pinned at 6: {pinned_most:?} in flight"
    );
    // Never a 503 for it: served stale when full, revalidated otherwise.
    assert!(stale.iter().all(|(s, _)| *s == 200), "{stale:?}");
    assert!(
        stale.iter().any(|(_, w)| *w),
        "none served stale: {stale:?}"
    );
    let rule = &shown["rules"][0];
    let max = rule["max"].as_u64().unwrap_or(0);
    assert!((C as u64 / 2..=3 * C as u64).contains(&max), "{rule}");
    assert_eq!(rule["auto"]["min"], 4, "{rule}");
    assert_eq!(rule["auto"]["probing"], false, "{rule}");
    let baseline = rule["auto"]["rtt_baseline_ms"].as_f64().unwrap_or(0.0);
    assert!((40.0..=100.0).contains(&baseline), "{rule}");
    let metric = ats_tests::wait_until(Duration::from_secs(15), || {
        ts.metric("plugin.throttle.learn.limit") == Some(6)
    });
    assert!(metric, "{:?}", ts.metric("plugin.throttle.learn.limit"));
    let shown = json(&ts.plugin_msg("throttle", "show learn"));
    assert_eq!(shown["rules"][0]["max"], 6, "{shown}");
    assert_eq!(shown["rules"][0]["auto"]["pinned"], true, "{shown}");
    let a = json(&ts.plugin_msg("throttle", "set learn max=auto"));
    assert_eq!(a["rules"][0]["changed"][0]["new"], "auto (6)", "{a}");
    let shown = json(&ts.plugin_msg("throttle", "show learn"));
    assert_eq!(shown["rules"][0]["auto"]["pinned"], false, "{shown}");

    // A reload keeps what was learned: the new rule goes on from the old
    // one's controller (a new one would probe again, its baseline unknown).
    ts.reload_remap(&format!("{remap}# reloaded\n"))
        .expect("reload");
    assert!(
        ts.diags()
            .contains("id=learn: max:auto goes on from the previous rule's max 6"),
        "{}",
        ts.diags()
    );
    let shown = json(&ts.plugin_msg("throttle", "show learn"));
    let kept = &shown["rules"][0]["auto"]["rtt_baseline_ms"];
    assert!(kept.as_f64().is_some_and(|b| b > 40.0), "{shown}");
    assert!(ts.is_running());
}

/// Bad `--limit=auto` options and `max:auto` parameters fail the rule,
/// naming the option.
#[test]
fn auto_with_what_it_cannot_learn_is_refused() {
    let origin = CapacityOrigin::start(C, BASE);
    for (plugin, params, says) in [
        (
            "rate_limit",
            "--limit=auto --key=ip",
            "--limit=auto cannot be combined with --key",
        ),
        (
            "rate_limit",
            "--limit=auto --limit-min=9 --limit-max=3",
            "--limit-min=9 is above --limit-max=3",
        ),
        (
            "rate_limit",
            "--limit=7 --limit-max=9",
            "--limit-max needs --limit=auto",
        ),
        (
            "throttle",
            "max:auto max-min:9 max-max:3",
            "parameter 'max-min' (9) is above 'max-max' (3)",
        ),
        (
            "throttle",
            "max:7 max-max:9",
            "parameter 'max-max' needs max:auto",
        ),
    ] {
        let pp: String = params.split(' ').map(|p| format!(" @pparam={p}")).collect();
        let rule = format!(
            "map http://b.test/ {} @plugin={}{pp}\n",
            origin.url(),
            ats_tests::plugin(plugin)
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
