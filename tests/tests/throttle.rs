//! throttle.so against a real traffic_server: fresh hits pass uncounted,
//! excess uncached requests get 503, stale content is served when `stale` or
//! `stale-if-error` allows it (without contacting the origin), statistics
//! reach throttle.log and the metrics, `file:` parameters load, and every
//! kind of bad input refuses the rule with a message naming it.
//!
//! Cache fills go through a plugin-free rule (`fill.test`) that maps to the
//! same origin URL, hence the same cache key, as the throttled rules: that is
//! how a `max:0` rule gets something in cache. `max-age=0` objects are stale
//! from the first lookup on.

use std::collections::BTreeMap;
use std::io;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ats_tests::client::{self, Response};
use ats_tests::{plugin, wait_until, Origin, TrafficServer};

const STALE_WARNING: &str = "110 - \"Response is stale\"";

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    format!(
        "map http://{host}/ {} @plugin={} {params}\n",
        origin.url(),
        plugin("throttle")
    )
}

fn fill_rule(origin: &Origin) -> String {
    format!("map http://fill.test/ {}\n", origin.url())
}

/// Stores `path` in cache through the fill rule with the given Cache-Control.
fn fill(ts: &TrafficServer, path: &str, cc: &str) {
    let r = ts
        .get("fill.test", path, &[("X-Origin-CC", cc)])
        .expect("fill request");
    assert_eq!(r.status, 200, "fill {path}");
}

fn spawn_get(
    port: u16,
    host: &'static str,
    path: &'static str,
    delay_ms: u32,
) -> JoinHandle<io::Result<Response>> {
    thread::spawn(move || {
        let delay = delay_ms.to_string();
        client::get(port, host, path, &[("X-Origin-Delay", &delay)])
    })
}

fn status(ts: &TrafficServer, host: &str, path: &str) -> u16 {
    ts.get(host, path, &[]).expect("request").status
}

fn counts(results: &[io::Result<Response>]) -> BTreeMap<u16, usize> {
    client::status_counts(results)
}

/// Waits until the origin is serving `n` requests (so places are taken).
fn wait_in_flight(origin: &Origin, n: usize) {
    assert!(
        wait_until(Duration::from_secs(5), || origin.in_flight() >= n),
        "origin never had {n} requests in flight"
    );
}

#[test]
fn fresh_hits_are_not_counted() {
    let origin = Origin::start();
    let remap = fill_rule(&origin)
        + &rule("zero.test", &origin, "@pparam=max:0")
        + &rule("one.test", &origin, "@pparam=max:1");
    let ts = TrafficServer::builder()
        .remap(remap)
        .start()
        .expect("start");
    fill(&ts, "/cached", "max-age=300");
    assert_eq!(origin.count(), 1);

    // max:0: nothing uncached gets through, yet fresh hits are served.
    for _ in 0..5 {
        let r = ts.get("zero.test", "/cached", &[]).expect("request");
        assert_eq!((r.status, r.body_text().as_str()), (200, "ok\n"));
        assert_eq!(r.header("Warning"), None);
    }
    let r = ts.get("zero.test", "/uncached", &[]).expect("request");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    assert_eq!(origin.count(), 1, "neither hits nor 503s reach the origin");

    // max:1 with its one place taken by a slow uncached request.
    let slow = spawn_get(ts.port(), "one.test", "/slow", 2000);
    wait_in_flight(&origin, 1);
    for _ in 0..5 {
        assert_eq!(status(&ts, "one.test", "/cached"), 200);
    }
    assert_eq!(status(&ts, "one.test", "/other"), 503);
    assert_eq!(slow.join().expect("thread").expect("slow").status, 200);
    // The place is free again (once ATS has closed the slow transaction,
    // which may be a moment after its response arrived), and the 503 was not cached.
    assert!(ats_tests::wait_until(Duration::from_secs(3), || status(
        &ts, "one.test", "/other"
    ) == 200));
    assert_eq!(status(&ts, "zero.test", "/uncached"), 503);
}

#[test]
fn concurrency_above_max_gets_503_and_places_come_back() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("c.test", &origin, "@pparam=max:3"))
        .start()
        .expect("start");
    let port = ts.port();
    // Distinct paths: concurrent requests for one URL wait for each other in
    // ATS's cache lock before the plugin sees them.
    let results = client::burst(10, move |i| {
        client::get(
            port,
            "c.test",
            &format!("/slow/{i}"),
            &[("X-Origin-Delay", "1500")],
        )
    });
    assert_eq!(counts(&results), BTreeMap::from([(200, 3), (503, 7)]));
    assert_eq!(origin.count(), 3);
    assert!(origin.max_in_flight() <= 3);
    for r in results.iter().flatten().filter(|r| r.status == 503) {
        assert!(
            r.elapsed < Duration::from_millis(1000),
            "503s are immediate"
        );
    }

    // Clients that give up still give their place back when the transaction closes.
    for i in 0..3 {
        let conn = client::Conn::open(port).expect("connect");
        conn.give_up_after(
            "c.test",
            &format!("/abandoned/{i}"),
            &[("X-Origin-Delay", "1000")],
            Duration::from_millis(200),
            client::GiveUp::Reset,
        )
        .expect("abort");
    }
    assert!(
        wait_until(Duration::from_secs(10), || {
            let results = client::burst(3, move |i| {
                client::get(port, "c.test", &format!("/again/{i}"), &[])
            });
            counts(&results) == BTreeMap::from([(200, 3)])
        }),
        "places were not released after client aborts"
    );
}

#[test]
fn stale_content_is_served_when_allowed() {
    let origin = Origin::start();
    let remap = fill_rule(&origin)
        + &rule("s60.test", &origin, "@pparam=max:0 @pparam=stale:60")
        + &rule("old.test", &origin, "@pparam=max:0 @pparam=stale:1")
        + &rule("sie.test", &origin, "@pparam=max:0")
        + &rule("busy.test", &origin, "@pparam=max:1 @pparam=stale:60")
        + &rule("under.test", &origin, "@pparam=max:5 @pparam=stale:60");
    let ts = TrafficServer::builder()
        .remap(remap)
        // Otherwise ATS itself may serve stale content when revalidation fails.
        .record("proxy.config.http.negative_revalidating_enabled", "INT 0")
        .start()
        .expect("start");
    fill(&ts, "/a", "max-age=0");
    fill(&ts, "/b", "max-age=0, stale-if-error=60");
    fill(&ts, "/c", "max-age=0, stale-if-error=1");
    fill(&ts, "/d", "max-age=0, must-revalidate");
    fill(&ts, "/e", "max-age=1");
    fill(&ts, "/f", "max-age=0");
    let filled = origin.count();
    // Age everything past 1 s of staleness (Date has 1 s resolution).
    thread::sleep(Duration::from_millis(3500));

    let stale_ok = |host: &str, path: &str| {
        let r = ts.get(host, path, &[]).expect("request");
        assert_eq!(r.status, 200, "{host}{path} should be served stale");
        assert_eq!(r.header("Warning"), Some(STALE_WARNING), "{host}{path}");
        assert_eq!(r.body_text(), "ok\n");
        let age: u64 = r.header("Age").and_then(|a| a.parse().ok()).unwrap_or(0);
        assert!(age >= 2, "{host}{path}: Age {age}");
    };
    stale_ok("s60.test", "/a");
    stale_ok("sie.test", "/b"); // only stale-if-error allows it
    stale_ok("old.test", "/b"); // stale:1, but stale-if-error=60 is greater
    assert_eq!(
        status(&ts, "old.test", "/a"),
        503,
        "stale for longer than stale:1"
    );
    assert_eq!(
        status(&ts, "sie.test", "/c"),
        503,
        "stale for longer than stale-if-error=1"
    );
    assert_eq!(
        status(&ts, "sie.test", "/a"),
        503,
        "neither stale nor stale-if-error"
    );
    assert_eq!(
        status(&ts, "s60.test", "/d"),
        503,
        "must-revalidate forbids stale"
    );
    // With credentials ATS revalidates even a hit forced fresh; that request
    // holds no place, so it is stopped before it reaches the origin.
    let r = ts
        .get("s60.test", "/a", &[("Authorization", "Basic eA==")])
        .expect("request");
    assert_eq!((r.status, r.header("Warning")), (503, None));
    assert!(ts.diags().contains("stale hit went to origin; 503"));
    assert_eq!(
        origin.count(),
        filled,
        "stale answers and 503s never reach the origin"
    );

    // The usual case: the place is taken by a slow request, a stale hit is served.
    let slow = spawn_get(ts.port(), "busy.test", "/slow", 2000);
    wait_in_flight(&origin, 1);
    stale_ok("busy.test", "/e");
    assert_eq!(status(&ts, "busy.test", "/other"), 503);
    assert_eq!(slow.join().expect("thread").expect("slow").status, 200);
    assert_eq!(origin.count(), filled + 1);

    // Under max, a stale hit is revalidated with the origin as usual.
    let r = ts.get("under.test", "/f", &[]).expect("request");
    assert_eq!((r.status, r.header("Warning")), (200, None));
    assert_eq!(origin.count(), filled + 2);
}

/// One throttle.log line: ATS's timestamp as seconds of the (local) day, and the figures.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    at: u32,
    tph: u64,
    tpu: u64,
    tps: u64,
}

/// Seconds of the day of `HH?MM?SS` (any one-byte separators).
fn day_secs(hms: &str) -> Option<u32> {
    let n = |r: std::ops::Range<usize>| hms.get(r).and_then(|v| v.parse::<u32>().ok());
    Some(n(0..2)? * 3600 + n(3..5)? * 60 + n(6..8)?)
}

/// The lines for `id`, in order. ATS writes e.g. `20260101.12h00m05s tpid=...`.
fn log_lines(log: &str, id: &str) -> Vec<Line> {
    let tag = format!(" tpid={id} ");
    log.lines()
        .filter_map(|l| {
            let (date, rest) = l.split_once(&tag)?;
            let at = date.split_once('.').and_then(|(_, t)| day_secs(t));
            let at = at.unwrap_or_else(|| panic!("no ATS timestamp in {l:?}"));
            let mut f = rest
                .split(' ')
                .map(|kv| kv.split_once('=').and_then(|(_, v)| v.parse().ok()));
            Some(Line {
                at,
                tph: f.next()??,
                tpu: f.next()??,
                tps: f.next()??,
            })
        })
        .collect()
}

#[test]
fn statistics_reach_throttle_log_and_metrics() {
    let origin = Origin::start();
    let rules = |with_b: bool| {
        let mut r = fill_rule(&origin)
            + &rule(
                "a.test",
                &origin,
                "@pparam=id:stats-a @pparam=max:2 @pparam=stale:60 @pparam=statfreq:500",
            );
        if with_b {
            r += &rule(
                "b.test",
                &origin,
                "@pparam=id:stats-b @pparam=max:5 @pparam=statfreq:500",
            );
        }
        r + &rule("noid.test", &origin, "@pparam=max:5 @pparam=statfreq:500")
    };
    let ts = TrafficServer::builder()
        .remap(rules(true))
        .record("proxy.config.http.negative_revalidating_enabled", "INT 0")
        .with_manager()
        .start()
        .expect("start");
    let port = ts.port();
    fill(&ts, "/s", "max-age=0");

    // Scripted load on stats-a (max 2): 5 slow requests -> 2 admitted, 3 refused;
    // while both places are taken, 2 stale hits are served.
    let burst = thread::spawn(move || {
        client::burst(5, move |i| {
            client::get(
                port,
                "a.test",
                &format!("/slow/{i}"),
                &[("X-Origin-Delay", "1500")],
            )
        })
    });
    wait_in_flight(&origin, 2);
    for _ in 0..2 {
        let r = ts.get("a.test", "/s", &[]).expect("request");
        assert_eq!((r.status, r.header("Warning")), (200, Some(STALE_WARNING)));
    }
    let results = burst.join().expect("burst");
    assert_eq!(counts(&results), BTreeMap::from([(200, 2), (503, 3)]));

    // Figures are per interval: summed over the lines they add up to the
    // load, and once idle a line shows zeros again (the mark restarts).
    let zero = |l: &Line| (l.tph, l.tpu, l.tps) == (0, 0, 0);
    let settled = |log: &str| {
        let a = log_lines(log, "stats-a");
        a.iter().map(|l| l.tpu).sum::<u64>() == 3
            && a.iter().map(|l| l.tps).sum::<u64>() == 2
            && a.last().is_some_and(zero)
    };
    assert!(
        ts.wait_for_log("throttle.log", Duration::from_secs(15), settled),
        "throttle.log: {}",
        ts.log("throttle.log")
    );
    let log = ts.log("throttle.log");
    let a = log_lines(&log, "stats-a");
    assert_eq!(
        a.iter().map(|l| l.tph).max(),
        Some(2),
        "high-water mark: {a:?}"
    );
    // Other rules log to the same file under their own ids.
    assert!(log_lines(&log, "stats-b").iter().all(zero));
    assert!(!log_lines(&log, "stats-b").is_empty());
    assert!(
        !log_lines(&log, "noid.test").is_empty(),
        "default id from the from-URL"
    );

    // The same events as cumulative metrics.
    for (name, want) in [
        ("unavailable", 3),
        ("stale", 2),
        ("admitted", 2),
        ("inflight", 0),
    ] {
        let metric = format!("plugin.throttle.stats-a.{name}");
        assert_eq!(ts.wait_metric(&metric, want), Ok(want), "{metric}");
    }
    let out = ts.traffic_ctl(&["metric", "match", "throttle"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "plugin.throttle.stats-b.inflight",
        "plugin.throttle.noid.test.fresh",
    ] {
        assert!(text.contains(name), "{name} missing from: {text}");
    }

    // Times (seconds of the day) at which a stats-b state was released.
    let released = || -> Vec<u32> {
        ts.diags()
            .lines()
            .filter(|l| l.contains("rule stats-b released"))
            .filter_map(|l| l.get(8..16).and_then(day_secs)) // "[Nov 22 04:26:40.565]"
            .collect()
    };

    // A bad reload is refused and the old rules keep their state and logging.
    // The instances it built are deleted again, and released at their timer's next tick.
    let refused = ts
        .reload_remap(&(rules(true) + &rule("bad.test", &origin, "@pparam=max:many")))
        .expect_err("bad reload");
    assert!(
        refused.contains("parameter 'max' has an invalid value 'many'"),
        "{refused}"
    );
    assert!(wait_until(Duration::from_secs(5), || released().len() == 1));

    // The count of lines per second below needs a few whole seconds of
    // stats-b: wait for its lines to span 6 s before removing it (on 10.1,
    // with metrics that are not late, the steps above may take less).
    let span = |log: &str| {
        let b = log_lines(log, "stats-b");
        b.last()
            .zip(b.first())
            .map_or(0, |(l, f)| l.at.saturating_sub(f.at))
    };
    let long_enough = |log: &str| span(log) >= 6;
    assert!(
        ts.wait_for_log("throttle.log", Duration::from_secs(15), long_enough),
        "stats-b logged over {} s: {}",
        span(&ts.log("throttle.log")),
        ts.log("throttle.log")
    );

    // A rule removed by a reload stops logging and is released once its
    // timer has ticked; the others go on, still in the one file.
    ts.reload_remap(&rules(false)).expect("reload");
    assert!(
        wait_until(Duration::from_secs(10), || released().len() == 2),
        "stats-b state never released"
    );
    let released = released()[1];
    assert!(
        ts.wait_for_log("throttle.log", Duration::from_secs(15), |log| {
            log_lines(log, "stats-a")
                .last()
                .is_some_and(|l| l.at >= released + 3)
        }),
        "the remaining rule stopped logging"
    );
    let b = log_lines(&ts.log("throttle.log"), "stats-b");
    assert!(
        b.iter().all(|l| l.at <= released),
        "deleted rule still logging: {b:?}"
    );
    assert_eq!(status(&ts, "a.test", "/after-reload"), 200);
    assert!(
        !ts.log_path("throttle_1.log").exists(),
        "one text log object per .so"
    );

    // One line per rule every 500 ms: two per whole second of its life.
    let (first, last) = (b[0].at, b[b.len() - 1].at);
    let inner = b.iter().filter(|l| l.at > first && l.at < last).count() as u32;
    let secs = last - first - 1;
    assert!(secs >= 5, "stats-b logged for only {secs} s (waited for 6)");
    assert!(
        inner + 2 >= 2 * secs && inner <= 2 * secs + 2,
        "{inner} stats-b lines in {secs} whole seconds: {b:?}"
    );
}

#[test]
fn file_parameters_with_an_escaped_space() {
    let origin = Origin::start();
    // remap.config splits at spaces even after a backslash, so the escaped
    // name must be quoted there; inside a file it needs no quotes.
    let remap = rule(
        "q.test",
        &origin,
        r#"@pparam="file:name\ with\ space.config""#,
    ) + &rule(
        "o.test",
        &origin,
        "@pparam=file:outer.config @pparam=id:outer",
    );
    let ts = TrafficServer::builder()
        .remap(remap)
        .config_file(
            "name with space.config",
            "# a throttle rule\nid:from-file\n\nmax:1\nstale:0\n",
        )
        .config_file("outer.config", "file:name\\ with\\ space.config\nmax:2\n")
        .start()
        .expect("start");
    let diags = ts.diags();
    assert!(
        diags.contains("rule http://q.test/ id=from-file max=1 stale=0s"),
        "{diags}"
    );
    // Later parameters override earlier ones, included files included.
    assert!(
        diags.contains("rule http://o.test/ id=outer max=2 stale=0s"),
        "{diags}"
    );

    let port = ts.port();
    for (host, max) in [("q.test", 1), ("o.test", 2)] {
        let results = client::burst(4, move |i| {
            client::get(
                port,
                host,
                &format!("/slow/{i}"),
                &[("X-Origin-Delay", "1000")],
            )
        });
        assert_eq!(
            counts(&results),
            BTreeMap::from([(200, max), (503, 4 - max)]),
            "{host}"
        );
    }
}

/// `line` holds the parts of `want` between `<root>` (the instance's
/// directory) in that order.
fn has_in_order(line: &str, want: &str) -> bool {
    let mut rest = line;
    want.split("<root>").all(|part| match rest.find(part) {
        Some(i) => {
            rest = &rest[i + part.len()..];
            true
        }
        None => false,
    })
}

#[test]
fn bad_input_refuses_the_rule_with_a_message_naming_it() {
    let origin = Origin::start();
    // ATS keeps ~1 KB of the message and ends it at a NUL: a 10 KB value
    // comes shortened after the parameter's name, and a NUL escaped.
    let digits = "9".repeat(10240);
    let nines = "9".repeat(64);
    let long_file = format!("max:{digits}\n");
    let files = [
        ("bad.config", "id:fine\nmax:1\n\nstale:lots\n"),
        ("loop.config", "max:1\nfile:loop.config\n"),
        ("long.config", long_file.as_str()),
        ("nul.config", "max:1\nstale:1\0\n"),
    ];
    let long_pparam = format!("@pparam=max:{digits}");
    let long_want = format!(
        "[throttle] parameter 'max' has an invalid value '{nines}…' (10240 bytes) at \
         @pparam=max:{}… (10244 bytes): too large; expected auto or a whole number from 0 to 4294967295",
        &nines[4..]
    );
    let long_file_want = format!(
        "[throttle] parameter 'max' has an invalid value '{nines}…' (10240 bytes) at \
         <root>/etc/long.config:1 (from @pparam=file:long.config): too large"
    );
    let cases: &[(&str, &str)] = &[
        ("@pparam=stale:5", "missing required parameter 'max'"),
        ("@pparam=max:abc", "parameter 'max' has an invalid value 'abc' at @pparam=max:abc: not a whole number"),
        ("@pparam=max:-5", "parameter 'max' has an invalid value '-5' at @pparam=max:-5: negative values are not allowed"),
        ("@pparam=max:1 @pparam=stale:-1", "parameter 'stale' has an invalid value '-1'"),
        ("@pparam=max:1 @pparam=statfreq:1s", "parameter 'statfreq' has an invalid value '1s'"),
        (r#"@pparam=max:1 @pparam=id:"two words""#, "parameter 'id' has an invalid value 'two words' at @pparam=id:\"two words\": it may not contain spaces"),
        ("@pparam=max:1 @pparam=file:missing.config", "parameter 'file' has an invalid value 'missing.config' at @pparam=file:missing.config: cannot read "),
        ("@pparam=max:1 @pparam=colour:red", "unknown parameter 'colour' at @pparam=colour:red (allowed: max, max-min, max-max, stale, statfreq, id, file)"),
        ("@pparam=file:bad.config", "/etc/bad.config:4 (from @pparam=file:bad.config): not a whole number"),
        ("@pparam=file:loop.config", "the file includes itself"),
        (r"@pparam=max:1 @pparam=file:name\ with\ space.config", "ends with a lone '\\'"),
        (&long_pparam, &long_want),
        ("@pparam=file:long.config", &long_file_want),
        ("@pparam=file:nul.config", "[throttle] parameter 'stale' has an invalid value '1\\0' at <root>/etc/nul.config:2 (from @pparam=file:nul.config): not a whole number; expected a number of seconds from 0 to 4294967295"),
    ];
    let port = origin.port();
    let failures: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = cases
            .chunks(4)
            .map(|chunk| {
                s.spawn(move || {
                    let mut failures = Vec::new();
                    for (params, want) in chunk {
                        let remap = format!(
                            "map http://bad.test/ http://127.0.0.1:{port}/ @plugin={} {params}\n",
                            plugin("throttle")
                        );
                        let mut b = TrafficServer::builder().remap(remap);
                        for (name, text) in files {
                            b = b.config_file(name, text);
                        }
                        match b.start() {
                            Ok(_) => failures.push(format!("{params}: the rule was accepted")),
                            Err(e) => {
                                let line = e
                                    .diags
                                    .lines()
                                    // ATS's refusal, not the load's note.
                                    .find(|l| {
                                        l.contains("[throttle]")
                                            && l.contains("failed to create instance")
                                    })
                                    .unwrap_or("");
                                if !(has_in_order(line, want)
                                    && line.contains("remap.config line 1"))
                                {
                                    failures.push(format!(
                                        "{params}: want {want:?} in {line:?}\n{e:?}"
                                    ));
                                }
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
