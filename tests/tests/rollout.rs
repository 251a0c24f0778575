//! rate_limit.so's rollout options against a real traffic_server: a dry run
//! (`--dry-run`, and `set … dry_run=on|off` live), exempt networks
//! (`--exempt`, directly and through a trusted proxy) and the refusal log
//! (`--log`) and its line bound under a flood; a dry run on Redis (`--store`).

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{Conn, Response};
use ats_tests::redis::Redis;
use ats_tests::{Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// `n` requests in a row from `src`, on one connection while ATS keeps it
/// (a refusal from a hook, as `--store` makes, closes it).
fn from(
    ts: &TrafficServer,
    src: Ipv4Addr,
    host: &str,
    n: usize,
    h: &[(&str, &str)],
) -> Vec<Response> {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    (0..n)
        .map(|i| {
            let r = c.get(host, &format!("/r{i}"), h).expect("response");
            if r.header("Connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"))
            {
                c = Conn::open_from(ts.port(), src).expect("connect");
            }
            r
        })
        .collect()
}

fn statuses(rs: &[Response]) -> Vec<u16> {
    rs.iter().map(|r| r.status).collect()
}

/// The refusal log's lines about `rule` (ATS puts its timestamp first).
fn lines_of(log: &str, rule: &str) -> Vec<String> {
    let tag = format!(" rule={rule} ");
    log.lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_owned)
        .collect()
}

const SEQUENTIAL: usize = 20;
/// `--rate=0.01 --burst=5`: 5 of 20 quick requests pass (the next token is
/// 100 s away), 15 are refused; a dry run lets all 20 through. The refill is
/// long because the test later expects a refusal after metric and log waits
/// that take up to ~10 s each on 9.2.
const LIMITED: &str = "--rate=0.01 --burst=5 --queue=0 --ratelimit-headers --log=rollout";

#[test]
fn dry_run_lets_through_and_counts_what_the_live_rule_refuses() {
    let origin = Origin::start();
    let remap = rule("live.test", &origin, &format!("{LIMITED} --tag=live"))
        + &rule(
            "dry.test",
            &origin,
            &format!("{LIMITED} --tag=dry --dry-run"),
        )
        + &rule("free.test", &origin, "--rate=1000000 --tag=free");
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    let started = Instant::now();
    // The same sequential load on each rule, and on one that never limits
    // (for the timing).
    let free = from(&ts, ip(1), "free.test", SEQUENTIAL, &[]);
    let live = from(&ts, ip(1), "live.test", SEQUENTIAL, &[]);
    let dry = from(&ts, ip(1), "dry.test", SEQUENTIAL, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the load must fit well within the bucket's 100 s refill for a deterministic count"
    );
    let live_s = statuses(&live);
    assert_eq!(
        live_s.iter().filter(|&&s| s == 200).count(),
        5,
        "{live_s:?}"
    );
    assert_eq!(
        live_s.iter().filter(|&&s| s == 429).count(),
        15,
        "{live_s:?}"
    );
    for r in &dry {
        assert_eq!(r.status, 200);
        // The RateLimit fields are still sent; nothing of a refusal is.
        assert!(r.header("RateLimit-Policy").is_some(), "{:?}", r.headers);
        assert!(r.header("RateLimit").is_some(), "{:?}", r.headers);
        assert_eq!(r.header("Retry-After"), None);
        // As the origin sent it (a refusal would say no-store).
        assert_eq!(r.header("Cache-Control"), free[0].header("Cache-Control"));
    }
    // None delayed: loosely against the rule that never limits.
    let total = |rs: &[Response]| rs.iter().map(|r| r.elapsed).sum::<Duration>();
    let slowest = dry.iter().map(|r| r.elapsed).max().unwrap_or_default();
    assert!(slowest < Duration::from_millis(500), "slowest {slowest:?}");
    assert!(
        total(&dry) < total(&free) * 3 + Duration::from_millis(300),
        "dry {:?} vs no limit {:?}",
        total(&dry),
        total(&free)
    );
    eprintln!(
        "{SEQUENTIAL} sequential requests: no limit {:?}, dry run {:?} (slowest {slowest:?})",
        total(&free),
        total(&dry)
    );
    assert_eq!(
        origin.count(),
        2 * SEQUENTIAL + 5,
        "every dry-run request reached the origin"
    );
    // The metrics equal the live run's refusals; nothing would have queued
    // (--queue=0). The witnesses are the non-zero counters.
    ts.wait_metrics_after(
        &[
            ("plugin.rate_limiter.remap.dry.dry_run_refused", 15),
            ("plugin.rate_limiter.remap.live.rejected", 15),
        ],
        &[
            ("plugin.rate_limiter.remap.dry.dry_run_queued", 0),
            ("plugin.rate_limiter.remap.dry.rejected", 0),
        ],
    )
    .expect("metrics");
    // One line per (would-be) refusal, in the log both rules share.
    let want = |rule: &str, dry: u8| {
        let ok = ts.wait_for_log("rollout.log", Duration::from_secs(20), |t| {
            lines_of(t, rule).len() >= 15
        });
        let lines = lines_of(&ts.log("rollout.log"), rule);
        assert!(ok && lines.len() == 15, "{rule}: {lines:#?}");
        for l in &lines {
            assert!(
                l.contains(&format!(
                    "event=refused rule={rule} client=127.0.0.1 reason=rate wait=0.000 dry_run={dry}"
                )),
                "{l}"
            );
        }
    };
    want("live", 0);
    want("dry", 1);

    // Live: off, the dry rule refuses (its bucket is as empty as the live
    // one's); on again, it lets through.
    let a = ts.plugin_msg("rate_limit", "set dry dry_run=off");
    assert!(
        a.contains(r#"{"new":"off","old":"on","option":"dry-run"}"#),
        "{a}"
    );
    assert_eq!(statuses(&from(&ts, ip(1), "dry.test", 1, &[])), [429]);
    let a = ts.plugin_msg("rate_limit", "show dry");
    assert!(a.contains("\"dry_run\":false"), "{a}");
    ts.plugin_msg("rate_limit", "set dry dry_run=on");
    assert_eq!(statuses(&from(&ts, ip(1), "dry.test", 1, &[])), [200]);
}

#[test]
fn dry_run_with_a_queue_counts_would_be_waits_and_holds_no_slot() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "q.test",
            &origin,
            "--limit=1 --queue=10 --dry-run --tag=dq",
        ))
        .with_manager()
        .start()
        .expect("start");
    // 4 slow requests at once: one holds the slot, 3 would have waited;
    // all run at once (no slot cap, no wait).
    let port = ts.port();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            thread::spawn(move || {
                ats_tests::client::get(
                    port,
                    "q.test",
                    &format!("/w{i}"),
                    &[("X-Origin-Delay", "800")],
                )
            })
        })
        .collect();
    let rs: Vec<Response> = handles
        .into_iter()
        .map(|h| h.join().expect("client").expect("response"))
        .collect();
    assert!(rs.iter().all(|r| r.status == 200));
    assert!(
        origin.max_in_flight() >= 3,
        "would-be waiters run at once: {}",
        origin.max_in_flight()
    );
    // `admitted` (the one that got the slot) is published with the slot in
    // `active`; 0 then means the slot was given back.
    ts.wait_metrics_after(
        &[
            ("plugin.rate_limiter.remap.dq.dry_run_queued", 3),
            ("plugin.rate_limiter.remap.dq.admitted", 1),
        ],
        &[
            ("plugin.rate_limiter.remap.dq.dry_run_refused", 0),
            ("plugin.rate_limiter.remap.dq.queued", 0),
            ("plugin.rate_limiter.remap.dq.active", 0),
        ],
    )
    .expect("metrics");
}

/// A rate wait in a dry run: the live rule spaces requests at the rate
/// (`--queue` lets them wait); the dry run delays none and counts each as
/// a would-be wait.
#[test]
fn dry_run_of_a_rate_wait_delays_nothing() {
    let origin = Origin::start();
    let opts = "--rate=5 --burst=1 --queue=100";
    let remap = rule("rw.test", &origin, &format!("{opts} --tag=rwlive"))
        + &rule("rd.test", &origin, &format!("{opts} --tag=rwdry --dry-run"));
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    let timed = |host: &str, n: usize| {
        let t = Instant::now();
        let rs = from(&ts, ip(1), host, n, &[]);
        (statuses(&rs), t.elapsed())
    };
    // Live: 5 requests take at least 4 × 200 ms.
    let (live, live_took) = timed("rw.test", 5);
    assert_eq!(live, [200; 5]);
    assert!(
        live_took >= Duration::from_millis(750),
        "live {live_took:?}"
    );
    let (dry, dry_took) = timed("rd.test", SEQUENTIAL);
    assert_eq!(dry, [200; SEQUENTIAL]);
    assert!(
        dry_took < Duration::from_millis(1500),
        "{SEQUENTIAL} dry-run requests took {dry_took:?}: delayed"
    );
    ts.wait_metrics_after(
        &[
            (
                "plugin.rate_limiter.remap.rwdry.dry_run_queued",
                SEQUENTIAL as i64 - 1,
            ),
            ("plugin.rate_limiter.remap.rwlive.queued", 4),
        ],
        &[
            ("plugin.rate_limiter.remap.rwdry.queued", 0),
            ("plugin.rate_limiter.remap.rwdry.dry_run_refused", 0),
        ],
    )
    .expect("metrics");
}

/// A dry-run flood over a small queue: the waits the live queue would have
/// refused are would-be refusals and run up no debt, so after
/// `set … dry_run=off` the live rule admits at its rate at once (it used to
/// find its bucket one interval in debt per flooding request).
#[test]
fn dry_run_flood_leaves_no_debt_for_the_live_rule() {
    const FLOOD: usize = 40;
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "fl.test",
            &origin,
            "--rate=1 --burst=1 --queue=1 --maxage=10000 --tag=flood --dry-run",
        ))
        .with_manager()
        .start()
        .expect("start");
    let started = Instant::now();
    let rs = from(&ts, ip(1), "fl.test", FLOOD, &[]);
    assert_eq!(statuses(&rs), [200; FLOOD]);
    let flood_took = started.elapsed();
    // Most would have been refused (live: the first passes, one waits, the
    // rest find the queue full), each refill during the flood aside.
    // (Metrics are published a little later.)
    let want = FLOOD as i64 - 2 - 2 * (flood_took.as_secs() as i64 + 1);
    let mut refused = None;
    let ok = ats_tests::wait_until(Duration::from_secs(20), || {
        refused = ts.metric("plugin.rate_limiter.remap.flood.dry_run_refused");
        refused.is_some_and(|r| r >= want)
    });
    assert!(ok, "dry_run_refused {refused:?} after {flood_took:?}");
    let a = ts.plugin_msg("rate_limit", "set flood dry_run=off");
    assert!(
        a.contains(r#"{"new":"off","old":"on","option":"dry-run"}"#),
        "{a}"
    );
    // What the flood left is what the live rule itself would have: the
    // bucket's theoretical arrival time at most (queue + 1) intervals ahead
    // (the admitted request's and the one would-be waiter's), so under 2 s
    // of waiting. The old debt, one interval per flooding request, is ~38 s:
    // past maxage, so a 429. The bound adds 500 ms for the request itself;
    // the wait alone can come within microseconds of 2 s when the metrics
    // and traffic_ctl answer at once (10.x), so 2 s flat was a flake.
    let t = Instant::now();
    let after = from(&ts, ip(1), "fl.test", 1, &[]);
    assert_eq!(statuses(&after), [200], "live after the dry-run flood");
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "waited {:?}",
        t.elapsed()
    );
}

/// The same with `--store` when the store fails (`--store-failure=local`,
/// the default): the local fallback of a dry run settles its waits as the
/// plain dry run does (issue 30: it used to spend a token per flooding
/// request, ~38 s of debt here, which the live rule then paid).
#[test]
fn a_failing_store_dry_run_flood_leaves_no_debt_either() {
    const FLOOD: usize = 40;
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "sf.test",
            &origin,
            "--rate=1 --burst=1 --queue=1 --maxage=10000 --tag=sflood --dry-run \
             --store=redis://127.0.0.1:1 --store-timeout=200",
        ))
        .with_manager()
        .start()
        .expect("start");
    let started = Instant::now();
    let rs = from(&ts, ip(1), "sf.test", FLOOD, &[]);
    assert_eq!(statuses(&rs), [200; FLOOD]);
    let flood_took = started.elapsed();
    let want = FLOOD as i64 - 2 - 2 * (flood_took.as_secs() as i64 + 1);
    let mut refused = None;
    let ok = ats_tests::wait_until(Duration::from_secs(20), || {
        refused = ts.metric("plugin.rate_limiter.remap.sflood.dry_run_refused");
        refused.is_some_and(|r| r >= want)
    });
    assert!(ok, "dry_run_refused {refused:?} after {flood_took:?}");
    let a = ts.plugin_msg("rate_limit", "set sflood dry_run=off");
    assert!(a.contains(r#""option":"dry-run""#), "{a}");
    // Live now, and the store still failing: the local limiter decides,
    // with at most what the live rule itself would have left (see above).
    let t = Instant::now();
    let after = from(&ts, ip(1), "sf.test", 1, &[]);
    assert_eq!(statuses(&after), [200], "live after the dry-run flood");
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "waited {:?}",
        t.elapsed()
    );
}

/// `--fair --flow-over=reject --dry-run`: a flow over its slots is logged
/// as `flow_over` and goes on.
#[test]
fn dry_run_with_fair_logs_flow_over_and_lets_through() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "fo.test",
            &origin,
            "--limit=4 --queue=10 --fair=ip --flow-slots=1 --strict --flow-over=reject \
             --dry-run --log=combo --tag=fo",
        ))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    let slow = move |i: usize| {
        ats_tests::client::get(
            port,
            "fo.test",
            &format!("/f{i}"),
            &[("X-Origin-Delay", "1000")],
        )
    };
    // The flow's one slot is held by the first; the second is over it.
    let first = thread::spawn(move || slow(0));
    thread::sleep(Duration::from_millis(300));
    let second = slow(1).expect("response");
    let first = first.join().expect("client").expect("response");
    assert_eq!((first.status, second.status), (200, 200));
    assert_eq!(origin.count(), 2);
    let ok = ts.wait_for_log("combo.log", Duration::from_secs(20), |t| {
        !lines_of(t, "fo").is_empty()
    });
    let lines = lines_of(&ts.log("combo.log"), "fo");
    assert!(ok && lines.len() == 1, "{lines:#?}");
    // (`key=` is the flow's, shown by its hash.)
    let l = &lines[0];
    assert!(
        l.contains("event=refused rule=fo client=127.0.0.1 ")
            && l.ends_with(" reason=flow_over wait=0.000 dry_run=1"),
        "{l}"
    );
    ts.wait_metric("plugin.rate_limiter.remap.fo.dry_run_refused", 1)
        .expect("metrics");
}

/// `--conntrack`: a dry run counts connections, as the live rule does: a
/// connection that would have waited is counted once, and its later
/// requests pass as the live rule would pass them.
#[test]
fn dry_run_with_conntrack_counts_connections() {
    let origin = Origin::start();
    let remap = rule(
        "ct.test",
        &origin,
        "--limit=1 --queue=10 --conntrack --dry-run --tag=dct",
    ) + &rule(
        "w.test",
        &origin,
        "--rate=0.01 --burst=1 --queue=0 --tag=dctw",
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    // The first connection holds the slot while it stays open.
    let mut holder = Conn::open_from(ts.port(), ip(1)).expect("connect");
    assert_eq!(
        holder.get("ct.test", "/a", &[]).expect("response").status,
        200
    );
    // The second would have waited: once, for all its requests.
    assert_eq!(statuses(&from(&ts, ip(2), "ct.test", 3, &[])), [200; 3]);
    // A witness counted after them.
    assert_eq!(statuses(&from(&ts, ip(1), "w.test", 2, &[])), [200, 429]);
    ts.wait_metrics_after(
        &[("plugin.rate_limiter.remap.dctw.rejected", 1)],
        &[
            ("plugin.rate_limiter.remap.dct.dry_run_queued", 1),
            ("plugin.rate_limiter.remap.dct.dry_run_refused", 0),
        ],
    )
    .expect("metrics");
    drop(holder);
}

/// `--conntrack`: a connection a dry run let through as a would-be waiter
/// is checked again once the dry run ends (it used to pass unchecked for
/// its whole life).
#[test]
fn conntrack_connection_let_through_by_a_dry_run_is_checked_after_it() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "ct.test",
            &origin,
            "--limit=1 --queue=1 --maxage=300 --conntrack --dry-run --tag=dcto",
        ))
        .with_manager()
        .start()
        .expect("start");
    // The first connection holds the slot while it stays open.
    let mut holder = Conn::open_from(ts.port(), ip(1)).expect("connect");
    assert_eq!(
        holder.get("ct.test", "/a", &[]).expect("response").status,
        200
    );
    // The second would have waited: let through.
    let mut other = Conn::open_from(ts.port(), ip(2)).expect("connect");
    assert_eq!(
        other.get("ct.test", "/b", &[]).expect("response").status,
        200
    );
    let a = ts.plugin_msg("rate_limit", "set dcto dry_run=off");
    assert!(
        a.contains(r#"{"new":"off","old":"on","option":"dry-run"}"#),
        "{a}"
    );
    // Live now: the slot is still held, so it waits --maxage and is refused.
    let r = other.get("ct.test", "/c", &[]).expect("response");
    assert_eq!(r.status, 429, "checked again after the dry run");
    drop(holder);
}

/// `set TARGET dry_run=` switches only the rules TARGET names; all of a
/// `--group`'s when it names the group.
#[test]
fn set_dry_run_switches_the_named_rule_of_a_group_only() {
    let origin = Origin::start();
    let g = "--rate=0.01 --burst=1 --queue=0 --group=mixed";
    let remap = rule("ga.test", &origin, &format!("{g} --tag=ga"))
        + &rule("gb.test", &origin, &format!("{g} --tag=gb"));
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    let dry = |shown: &str| -> Vec<(String, bool)> {
        let v: serde_json::Value = serde_json::from_str(shown).expect("json");
        let rules = v["limiters"][0]["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut r: Vec<(String, bool)> = rules
            .iter()
            .map(|r| {
                let m = r["metrics"].as_str().unwrap_or_default();
                (
                    m.rsplit('.').next().unwrap_or_default().to_owned(),
                    r["dry_run"] == true,
                )
            })
            .collect();
        r.sort();
        r
    };
    // The group's one token goes to the first request.
    assert_eq!(statuses(&from(&ts, ip(1), "ga.test", 1, &[])), [200]);
    let a = ts.plugin_msg("rate_limit", "set ga dry_run=on");
    assert!(
        a.contains(r#"{"new":"on","old":"off","option":"dry-run"}"#),
        "{a}"
    );
    let shown = ts.plugin_msg("rate_limit", "show mixed");
    assert_eq!(
        dry(&shown),
        [("ga".to_owned(), true), ("gb".to_owned(), false)],
        "{shown}"
    );
    assert_eq!(statuses(&from(&ts, ip(1), "ga.test", 2, &[])), [200, 200]);
    assert_eq!(statuses(&from(&ts, ip(1), "gb.test", 1, &[])), [429]);
    // Naming the group switches every rule.
    ts.plugin_msg("rate_limit", "set mixed dry_run=on");
    let shown = ts.plugin_msg("rate_limit", "show mixed");
    assert_eq!(
        dry(&shown),
        [("ga".to_owned(), true), ("gb".to_owned(), true)],
        "{shown}"
    );
    assert_eq!(statuses(&from(&ts, ip(1), "gb.test", 1, &[])), [200]);
}

#[test]
fn exempt_clients_take_nothing_and_are_never_limited() {
    let origin = Origin::start();
    // Rule-wide bucket of 1: any token an exempt client took would refuse
    // the first non-exempt request.
    let ex = "--rate=0.01 --burst=1 --queue=0 --exempt=127.0.0.3,198.51.100.0/24";
    let remap = rule(
        "ex.test",
        &origin,
        &format!("{ex} --trusted-proxies=127.0.0.2 --tag=ex"),
    ) + &rule(
        "exk.test",
        &origin,
        &format!("{ex} --key=ip --trusted-proxies=127.0.0.2 --tag=exk"),
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    for host in ["ex.test", "exk.test"] {
        // Exempt: directly, and behind the trusted proxy.
        assert_eq!(statuses(&from(&ts, ip(3), host, 10, &[])), [200; 10]);
        let xff = [("X-Forwarded-For", "198.51.100.7")];
        assert_eq!(statuses(&from(&ts, ip(2), host, 10, &xff)), [200; 10]);
        // Not exempt: limited, from its first request on.
        assert_eq!(statuses(&from(&ts, ip(4), host, 3, &[])), [200, 429, 429]);
        // An untrusted peer's X-Forwarded-For is not believed.
        let spoof = [("X-Forwarded-For", "198.51.100.7")];
        let s = statuses(&from(&ts, ip(5), host, 2, &spoof));
        if host == "ex.test" {
            assert_eq!(s, [429, 429], "{host}");
        } else {
            assert_eq!(s, [200, 429], "{host}: its own key");
        }
        // Behind the proxy, a client outside the exempt networks is limited.
        let other = [("X-Forwarded-For", "203.0.113.9")];
        let s = statuses(&from(&ts, ip(2), host, 2, &other));
        assert_eq!(s[1], 429, "{host}");
    }
    // With --key, exempt clients hold no key: only 127.0.0.4, 127.0.0.5
    // and 203.0.113.9 do.
    ts.wait_metrics_after(
        &[
            ("plugin.rate_limiter.remap.exk.exempt", 20),
            ("plugin.rate_limiter.remap.ex.exempt", 20),
        ],
        &[("plugin.rate_limiter.remap.exk.keys", 3)],
    )
    .expect("metrics");
}

/// `--store`: Redis decides after remap. A dry-run request does not wait
/// for it (not even for a hung Redis); the reply is counted and logged when
/// it comes back, and equals the live rule's refusals.
#[test]
fn dry_run_on_redis_never_waits_for_it() {
    let redis = Redis::start().expect("redis-server");
    let origin = Origin::start();
    let store = format!(
        "--rate=0.1 --burst=5 --store={} --store-timeout=1000 --store-failure=closed --log=rollout",
        redis.url()
    );
    let remap = rule("sl.test", &origin, &format!("{store} --tag=slive"))
        + &rule("sd.test", &origin, &format!("{store} --tag=sdry --dry-run"));
    let ts = TrafficServer::builder()
        .remap(remap)
        .with_manager()
        .start()
        .expect("start");
    let started = Instant::now();
    let live = statuses(&from(&ts, ip(1), "sl.test", SEQUENTIAL, &[]));
    let dry = from(&ts, ip(1), "sd.test", SEQUENTIAL, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "within the refill"
    );
    assert_eq!(live.iter().filter(|&&s| s == 200).count(), 5, "{live:?}");
    assert_eq!(live.iter().filter(|&&s| s == 429).count(), 15, "{live:?}");
    assert_eq!(statuses(&dry), [200; SEQUENTIAL]);
    ts.wait_metrics_after(
        &[
            ("plugin.rate_limiter.remap.sdry.dry_run_refused", 15),
            ("plugin.rate_limiter.remap.slive.rejected", 15),
        ],
        &[("plugin.rate_limiter.remap.sdry.rejected", 0)],
    )
    .expect("metrics");
    // A hung Redis: dry-run requests go on at once, well before the 1 s
    // --store-timeout; when it passes, --store-failure=closed's would-be
    // refusals are counted and logged.
    redis.freeze(true).expect("freeze");
    let hung = from(&ts, ip(1), "sd.test", 5, &[]);
    // Hung past the timeout, so the decisions fail rather than come late.
    thread::sleep(Duration::from_millis(1500));
    redis.freeze(false).expect("thaw");
    for r in &hung {
        assert_eq!(r.status, 200);
        assert!(r.elapsed < Duration::from_millis(500), "{:?}", r.elapsed);
    }
    ts.wait_metric("plugin.rate_limiter.remap.sdry.dry_run_refused", 20)
        .expect("store failures counted");
    let ok = ts.wait_for_log("rollout.log", Duration::from_secs(20), |t| {
        lines_of(t, "sdry").len() >= 20
    });
    let lines = lines_of(&ts.log("rollout.log"), "sdry");
    assert!(ok && lines.len() == 20, "{lines:#?}");
    let with = |why: &str| {
        lines
            .iter()
            .filter(|l| {
                l.contains(&format!(
                    "client=127.0.0.1 reason={why} wait=0.000 dry_run=1"
                ))
            })
            .count()
    };
    assert_eq!((with("rate"), with("store_failure")), (15, 5), "{lines:#?}");
    // `set` on a --store rule: dry_run= alone is applied; with a limit,
    // nothing is.
    let a = ts.plugin_msg("rate_limit", "set slive dry_run=on");
    assert!(
        a.contains(r#"{"new":"on","old":"off","option":"dry-run"}"#),
        "{a}"
    );
    let a = ts.plugin_msg("rate_limit", "set slive dry_run=off burst=9");
    assert!(a.contains("\"ok\":false"), "{a}");
    assert!(a.contains("is decided in Redis (--store)"), "{a}");
    let a = ts.plugin_msg("rate_limit", "show slive");
    assert!(a.contains("\"dry_run\":true"), "still on: {a}");
}

/// `--store --limit`: a dry-run request holds the lease Redis grants until
/// it ends, as the live rule would, so concurrent requests past the limit
/// are counted as would-be refusals; all of them still pass.
#[test]
fn dry_run_on_redis_counts_concurrency_refusals() {
    let redis = Redis::start().expect("redis-server");
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "sc.test",
            &origin,
            &format!("--limit=1 --store={} --dry-run --tag=sconc", redis.url()),
        ))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    let slow = move |i: usize| {
        ats_tests::client::get(
            port,
            "sc.test",
            &format!("/c{i}"),
            &[("X-Origin-Delay", "1000")],
        )
    };
    // The first holds the lease while the others ask.
    let first = thread::spawn(move || slow(0));
    thread::sleep(Duration::from_millis(300));
    let others: Vec<_> = (1..3).map(|i| thread::spawn(move || slow(i))).collect();
    let mut rs = vec![first.join().expect("client").expect("response")];
    rs.extend(
        others
            .into_iter()
            .map(|h| h.join().expect("client").expect("response")),
    );
    assert_eq!(statuses(&rs), [200; 3]);
    ts.wait_metrics_after(
        &[("plugin.rate_limiter.remap.sconc.dry_run_refused", 2)],
        &[("plugin.rate_limiter.remap.sconc.rejected", 0)],
    )
    .expect("metrics");
    // Every lease is given back when its request ends.
    let leases = || redis.int(&["ZCARD", "rl:{sconc}:leases"]).unwrap_or(-1);
    assert!(
        ats_tests::wait_until(Duration::from_secs(5), || leases() == 0),
        "leases left: {}",
        leases()
    );
}

const FLOOD: usize = 100_000;
const THREADS: usize = 4;
const BATCH: usize = 500;

#[test]
fn refusal_log_stays_within_its_bound_under_a_flood() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "flood.test",
            &origin,
            "--rate=0.001 --burst=1 --queue=0 --log=flood --tag=flood",
        ))
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            thread::spawn(move || {
                let mut c = Conn::open_from(port, ip(10 + t as u8)).expect("connect");
                let mine = FLOOD / THREADS;
                let mut refused = 0;
                for _ in 0..mine / BATCH {
                    let h = vec![Vec::new(); BATCH];
                    let rs = c.pipeline("flood.test", "/", &h).expect("pipeline");
                    refused += rs.iter().filter(|r| r.status == 429).count();
                }
                refused
            })
        })
        .collect();
    let refused: usize = handles.into_iter().map(|h| h.join().expect("sender")).sum();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(refused, FLOOD - 1, "one token, then every request refused");
    assert!(secs < 60.0, "the flood took {secs} s");
    // Every refusal is on its own line or counted in a summary line (the
    // last summary comes within a second or two of the flood's end).
    let accounted = |t: &str| {
        let lines = lines_of(t, "flood");
        let events = lines.iter().filter(|l| l.contains("event=refused")).count();
        let summarised: usize = lines
            .iter()
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix("lines="))
                    .and_then(|n| n.parse::<usize>().ok())
            })
            .sum();
        events + summarised
    };
    let whole = ts.wait_for_log("flood.log", Duration::from_secs(30), |t| {
        accounted(t) >= FLOOD - 1
    });
    let text = ts.log("flood.log");
    assert!(whole, "accounted {} of {}", accounted(&text), FLOOD - 1);
    assert_eq!(accounted(&text), FLOOD - 1);
    // The documented bound: 100 event lines and 1 summary per second of the
    // flood, plus the seconds it started and ended in.
    let lines = lines_of(&text, "flood");
    let bound = 101 * (secs.ceil() as usize + 2);
    assert!(
        lines.len() <= bound,
        "{} lines for a {secs:.1} s flood (bound {bound})",
        lines.len()
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("event=suppressed rule=flood lines=") && l.contains(" rate=")),
        "summaries by reason"
    );
    eprintln!(
        "flood: {} refusals in {secs:.1} s, {} log lines ({} bytes)",
        FLOOD - 1,
        lines.len(),
        text.len()
    );
}

/// A bad `--exempt` or `--log` fails the rule, as traffic_server logs it:
/// the option, the value, what is allowed.
#[test]
fn bad_rollout_values_fail_the_rule_naming_option_value_and_allowed() {
    let origin = Origin::start();
    for (params, want) in [
        (
            "--rate=5 --exempt=10.0.0.0/8,lb",
            "[rate_limit] --exempt has an invalid value '10.0.0.0/8,lb': allowed IP addresses \
             or CIDRs, comma-separated",
        ),
        (
            "--rate=5 --log=../../etc/passwd",
            "[rate_limit] --log has an invalid value '../../etc/passwd': allowed 1-64 \
             letters, digits, '_', '-', not starting with '-', .log optional, not *_ctl, not diags, \
             error, traffic, manager, squid, throttle, ip_throttle (NAME.log in ATS's log dir)",
        ),
        (
            "--rate=5 --log=diags",
            "[rate_limit] --log has an invalid value 'diags': allowed 1-64 \
             letters, digits, '_', '-', not starting with '-', .log optional, not *_ctl, not diags, \
             error, traffic, manager, squid, throttle, ip_throttle (NAME.log in ATS's log dir)",
        ),
    ] {
        let err = TrafficServer::builder()
            .remap(rule("bad.test", &origin, params))
            .start()
            .err()
            .unwrap_or_else(|| panic!("{params} must fail the rule"));
        let line = err
            .diags
            .lines()
            .find(|l| l.contains("failed to create instance for plugin"))
            .unwrap_or_else(|| panic!("no refusal in diags.log: {err:?}"));
        assert!(line.ends_with(want), "want {want:?} in {line:?}");
    }
}
