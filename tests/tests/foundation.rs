//! The foundation's guarantees, against a real traffic_server: our plugins
//! load, a panic anywhere fails safe without taking the proxy down, a bad
//! option refuses the rule with a message naming it, and the safe layer's
//! parking, timers, per-transaction state, metrics, text logs and reloads work.

use std::time::{Duration, Instant};

use ats_tests::{client, plugin, Origin, TrafficServer};

/// How much sooner than its value a timer armed while handling a request
/// may end, as the client measures it. ATS counts from its thread's clock
/// as read before the poll that delivered the request (a poll lasts up to
/// `proxy.config.thread.max_heartbeat_mseconds`, 60 ms) and `Timer::after`
/// drops sub-millisecond parts: 61 ms, rounded up to 100 for a thread that
/// waits for a CPU after its poll on a loaded 2-core machine. Seen: 4 ms.
const TIMER_EARLY: Duration = Duration::from_millis(100);

fn probe_rule(origin: &Origin, params: &str) -> String {
    format!(
        "map http://probe.test/ {} @plugin={} {params}\n",
        origin.url(),
        plugin("probe")
    )
}

#[test]
fn each_plugin_loads_with_pparams_and_proxies() {
    let origin = Origin::start();
    let remap = format!(
        "map http://t.test/ {o} @plugin={t} @pparam=max:100 @pparam=id:t1\n\
         map http://r.test/ {o} @plugin={r} @pparam=--limit=100 @pparam=--queue=10\n",
        o = origin.url(),
        t = plugin("throttle"),
        r = plugin("rate_limit"),
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    for host in ["t.test", "r.test"] {
        let r = ts.get(host, "/hello", &[]).expect("request");
        assert_eq!(r.status, 200, "{host}: {:?}", r);
        assert_eq!(r.body_text(), "ok\n");
    }
    assert_eq!(origin.count(), 2);
    let paths: Vec<String> = origin.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/hello", "/hello"]);
}

#[test]
fn panics_fail_safe_and_traffic_server_survives() {
    let origin = Origin::start();
    let mut ts = TrafficServer::builder()
        .remap(probe_rule(&origin, ""))
        .start()
        .expect("start");

    let ok = ts.get("probe.test", "/", &[]).expect("request");
    assert_eq!(ok.status, 200);

    // Panic in TSRemapDoRemap: the request is answered with a 500 and never reaches the origin.
    let before = origin.count();
    let r = ts.get("probe.test", "/panic/remap", &[]).expect("request");
    assert_eq!(r.status, 500);
    assert_eq!(
        origin.count(),
        before,
        "a panicking remap must not reach the origin"
    );
    assert_eq!(ts.get("probe.test", "/", &[]).expect("request").status, 200);

    // Panic in a hook handler (POST_REMAP).
    let r = ts.get("probe.test", "/panic/hook", &[]).expect("request");
    assert_eq!(r.status, 500);
    assert_eq!(ts.get("probe.test", "/", &[]).expect("request").status, 200);

    // Panic at TXN_CLOSE, after the response went out: the client got its answer,
    // and the transaction still closes (its state is reaped, the proxy goes on).
    let r = ts.get("probe.test", "/panic/close", &[]).expect("request");
    assert_eq!(r.status, 200);

    // Many panics in a row do not accumulate damage.
    for _ in 0..50 {
        assert_eq!(
            ts.get("probe.test", "/panic/hook", &[])
                .expect("request")
                .status,
            500
        );
    }
    assert_eq!(ts.get("probe.test", "/", &[]).expect("request").status, 200);
    assert!(ts.is_running(), "traffic_server exited");

    // A timer panics while it holds a parked transaction: the token is
    // dropped during the unwind, and the transaction is failed safe (500)
    // once the guard has stopped it.
    let r = ts.get("probe.test", "/panic/parked", &[]).expect("request");
    assert_eq!(r.status, 500);
    // The same on the transaction's own thread, where the fail-safe would
    // otherwise run inline, inside the unwind.
    let r = ts
        .get("probe.test", "/panic/parked/home", &[])
        .expect("request");
    assert_eq!(r.status, 500);
    assert_eq!(ts.get("probe.test", "/", &[]).expect("request").status, 200);
    assert!(ts.is_running(), "traffic_server exited");

    assert!(ts.wait_for_log("diags.log", Duration::from_secs(5), |d| d
        .contains("panic in TSRemapDoRemap: 'probe: deliberate panic in DoRemap' at tests/probe-plugin/src/lib.rs")
        && d.contains("panic in hook handler: 'probe: deliberate panic in a hook'")
        && d.contains("panic in hook handler: 'probe: deliberate panic at TXN_CLOSE'")
        && d.contains("parked transaction dropped unresolved: answering 500")));
    // The fail-safe re-enable comes after the guard logged the panic, never
    // from a destructor while the panic unwinds.
    let diags = ts.diags();
    for (panic, fail_safe) in [
        (
            "panic in hook handler: 'probe: deliberate panic in a hook'",
            "hook handler did not complete: answering 500",
        ),
        (
            "panic in timer: 'probe: deliberate panic holding a parked transaction'",
            "parked transaction dropped unresolved: answering 500",
        ),
    ] {
        let (p, f) = (diags.find(panic), diags.find(fail_safe));
        assert!(
            matches!((p, f), (Some(p), Some(f)) if p < f),
            "expected '{panic}' before '{fail_safe}' in diags.log:\n{diags}"
        );
    }
    // Both parked panics: each fail-safe line follows its own panic line.
    let lines: Vec<&str> = diags
        .lines()
        .filter(|l| l.contains("holding a parked transaction") || l.contains("dropped unresolved"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for pair in lines.chunks(2) {
        assert!(
            pair[0].contains("panic in timer") && pair[1].contains("dropped unresolved"),
            "{lines:?}"
        );
    }
}

/// Every change to a parked transaction happens on the thread it parked on,
/// wherever its resumption starts: a net-thread timer, a task-thread timer,
/// or another transaction's TXN_CLOSE handing it a slot. Over 10 200
/// resumptions the probe (which records each request's thread itself)
/// counts none off home, and many that started elsewhere.
#[test]
fn parked_transactions_are_changed_only_on_their_own_thread() {
    const CLIENTS: usize = 24;
    const PER_CLIENT: usize = 425; // 10 200 requests
    let origin = Origin::start();
    let mut ts = TrafficServer::builder()
        .remap(probe_rule(&origin, ""))
        .start()
        .expect("start");
    let port = ts.port();
    let deadline = Instant::now() + Duration::from_secs(240);
    let handles: Vec<_> = (0..CLIENTS)
        .map(|c| {
            std::thread::spawn(move || {
                let mut seen = Vec::with_capacity(PER_CLIENT);
                let mut conn = client::Conn::open(port).expect("connect");
                for i in 0..PER_CLIENT {
                    if Instant::now() > deadline {
                        break;
                    }
                    let path = match (c + i) % 3 {
                        0 => "/home/net/1",
                        1 => "/home/task/1",
                        _ => "/home/handoff",
                    };
                    let again = |conn: &mut client::Conn| {
                        *conn = client::Conn::open(port)?;
                        conn.get("probe.test", path, &[])
                    };
                    let r = match conn.get("probe.test", path, &[]) {
                        Ok(r) => r,
                        Err(_) => match again(&mut conn) {
                            Ok(r) => r,
                            // traffic_server is gone: the main thread says so.
                            Err(_) => break,
                        },
                    };
                    seen.push((
                        path,
                        r.status,
                        r.header("X-Probe-Home").map(str::to_owned),
                        r.header("X-Probe-Initiated").map(str::to_owned),
                        r.header("X-Probe-Same-Thread").map(str::to_owned),
                    ));
                }
                seen
            })
        })
        .collect();
    let seen: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    assert!(ts.is_running(), "traffic_server died during the run");
    assert_eq!(
        seen.len(),
        CLIENTS * PER_CLIENT,
        "not all requests ran in time"
    );

    let bad: Vec<_> = seen.iter().filter(|s| s.1 != 200).take(5).collect();
    assert!(bad.is_empty(), "non-200 answers: {bad:?}");
    let resumed = seen.iter().filter(|s| s.2.is_some()).count();
    let off_home = seen
        .iter()
        .filter(|s| s.2.as_deref() == Some("off"))
        .count();
    let foreign = |p: &str| {
        seen.iter()
            .filter(|s| s.0 == p && s.3.as_deref() == Some("foreign"))
            .count()
    };
    // Handoff requests that found the gate free were never parked.
    assert!(
        resumed >= 2 * CLIENTS * PER_CLIENT / 3,
        "only {resumed} resumed"
    );
    assert_eq!(
        off_home, 0,
        "{off_home} of {resumed} changed off their thread"
    );
    // And the thread recorded at park is the one the transaction's own hooks
    // run on afterwards (the probe's record, not the safe layer's).
    let moved = seen.iter().filter(|s| s.4.as_deref() == Some("no")).count();
    let compared = seen.iter().filter(|s| s.4.is_some()).count();
    assert!(
        compared >= resumed,
        "{compared} compared, {resumed} resumed"
    );
    assert_eq!(
        moved, 0,
        "{moved} of {compared} continued on another thread"
    );
    // The proof needs resumptions that really started elsewhere: every task
    // timer does, and with two net threads some net timers and hand-offs do.
    assert!(
        foreign("/home/task/1") >= CLIENTS * PER_CLIENT / 3 - CLIENTS,
        "task-thread resumes: {}",
        foreign("/home/task/1")
    );
    assert!(foreign("/home/net/1") + foreign("/home/handoff") > 0);
    assert!(ts.diags().find("dropped unresolved").is_none());
}

#[test]
fn bad_option_refuses_the_rule_naming_the_option() {
    let origin = Origin::start();
    let err = TrafficServer::builder()
        .remap(probe_rule(&origin, "@pparam=--bogus=1"))
        .start()
        .err()
        .expect("traffic_server must refuse a rule with an unknown option");
    assert!(
        err.diags
            .contains("unknown option '--bogus=1' (allowed: --tag=<text>, --log)"),
        "{err:?}"
    );
}

#[test]
fn parked_transactions_resume_from_timers_and_cancelled_timers_never_run() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(probe_rule(&origin, ""))
        .with_manager()
        .start()
        .expect("start");

    // Parked at POST_REMAP, resumed by a timer on another thread after 300 ms.
    let r = ts.get("probe.test", "/park/300", &[]).expect("request");
    assert_eq!(r.status, 200);
    assert!(
        r.elapsed >= Duration::from_millis(300) - TIMER_EARLY,
        "resumed too early: {:?}",
        r.elapsed
    );
    assert!(
        r.elapsed < Duration::from_millis(2000),
        "resumed too late: {:?}",
        r.elapsed
    );

    // Many parked at once, all resumed.
    let port = ts.port();
    let results = client::burst(40, move |i| {
        client::get(port, "probe.test", &format!("/park/{}", 50 + i * 5), &[])
    });
    assert_eq!(
        client::status_counts(&results).get(&200),
        Some(&40),
        "{:?}",
        client::status_counts(&results)
    );

    // Armed then cancelled: the transaction goes on at once and the task never runs.
    for _ in 0..20 {
        let r = ts.get("probe.test", "/cancel/100", &[]).expect("request");
        assert_eq!(
            r.status, 200,
            "cancel() must succeed before the timer fires"
        );
    }
    // 1 + 40 + 20 requests went through DoRemap, counted by a TSStat metric
    // (read through traffic_ctl, so this also proves metrics reach it).
    assert_eq!(ts.wait_metric("plugin.probe.requests", 61), Ok(61));
    assert_eq!(ts.metric("plugin.probe.cancelled_timer_ran"), Some(0));
}

#[test]
fn per_transaction_state_is_per_transaction() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(probe_rule(&origin, "@pparam=--tag=t1"))
        .start()
        .expect("start");
    let port = ts.port();
    let results = client::burst(30, move |_| client::get(port, "probe.test", "/", &[]));
    let mut seqs: Vec<u64> = results
        .iter()
        .map(|r| {
            let r = r.as_ref().expect("request");
            assert_eq!(r.header("X-Probe-Tag"), Some("t1"));
            r.header("X-Probe-Txn-State")
                .and_then(|v| v.parse().ok())
                .expect("state header")
        })
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 30, "each transaction must see its own state");
}

#[test]
fn text_log_lines_reach_the_log_directory() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(probe_rule(&origin, "@pparam=--log"))
        .start()
        .expect("start");
    for i in 0..3 {
        assert_eq!(
            ts.get("probe.test", &format!("/line{i}"), &[])
                .expect("request")
                .status,
            200
        );
    }
    assert!(
        ts.wait_for_log("probe.log", Duration::from_secs(10), |l| l
            .contains("probe path=/line2")),
        "probe.log: {}",
        ts.log("probe.log")
    );
    // ATS adds its own timestamp before our text.
    let line = ts
        .log("probe.log")
        .lines()
        .find(|l| l.ends_with("path=/line0"))
        .map(str::to_owned);
    let line = line.expect("line0");
    assert!(
        line.len() > "probe path=/line0".len() + 10,
        "no timestamp in {line:?}"
    );
}

#[test]
fn config_reload_swaps_instances_without_disturbing_traffic() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(probe_rule(&origin, "@pparam=--tag=old"))
        .with_manager()
        .start()
        .expect("start");
    assert_eq!(
        ts.get("probe.test", "/", &[])
            .expect("request")
            .header("X-Probe-Tag"),
        Some("old")
    );

    // A request parked across the reload finishes normally on the old instance.
    let port = ts.port();
    let parked = std::thread::spawn(move || client::get(port, "probe.test", "/park/1500", &[]));
    std::thread::sleep(Duration::from_millis(200));
    ts.reload_remap(&probe_rule(&origin, "@pparam=--tag=new"))
        .expect("reload");
    let start = Instant::now();
    let ok = ats_tests::wait_until(Duration::from_secs(10), || {
        ts.get("probe.test", "/", &[])
            .map(|r| r.header("X-Probe-Tag") == Some("new"))
            .unwrap_or(false)
    });
    assert!(
        ok,
        "new instance not serving {:?} after reload",
        start.elapsed()
    );
    let r = parked.join().expect("thread").expect("parked request");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Probe-Tag"), Some("old"));

    // A reload with a bad option is refused and the old rule keeps serving.
    let refused = ts
        .reload_remap(&probe_rule(&origin, "@pparam=--nope"))
        .expect_err("bad reload must be refused");
    assert!(refused.contains("unknown option '--nope'"), "{refused}");
    assert_eq!(
        ts.get("probe.test", "/", &[])
            .expect("request")
            .header("X-Probe-Tag"),
        Some("new")
    );
}
