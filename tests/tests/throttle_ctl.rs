//! `traffic_ctl plugin msg throttle "…"` against a real traffic_server
//! under traffic_manager: `show` with the live counts, `set max=` and
//! `set stale=` taking effect at once, bad commands answered without a
//! change, and the file winning at the next load of remap.config.

use std::collections::BTreeMap;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ats_tests::client::{self, Response};
use ats_tests::{wait_until, Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("throttle", host, origin, params)
}

fn start(remap: String) -> TrafficServer {
    TrafficServer::builder()
        .remap(remap)
        // Otherwise ATS itself may serve stale content when revalidation fails.
        .record("proxy.config.http.negative_revalidating_enabled", "INT 0")
        .with_manager()
        .start()
        .expect("start")
}

fn ctl(ts: &TrafficServer, command: &str) -> String {
    ts.plugin_msg("throttle", command)
}

/// A slow uncached request (distinct paths: one URL's requests would wait
/// for each other in ATS's cache lock).
fn slow(ts: &TrafficServer, host: &'static str, path: String) -> JoinHandle<u16> {
    let port = ts.port();
    thread::spawn(move || {
        client::get(port, host, &path, &[("X-Origin-Delay", "4000")]).map_or(0, |r| r.status)
    })
}

fn status(ts: &TrafficServer, host: &str, path: &str) -> u16 {
    ts.get(host, path, &[]).map_or(0, |r: Response| r.status)
}

#[test]
fn show_reports_in_flight_and_set_max_changes_admission_at_once() {
    let origin = Origin::start();
    let ts = start(rule("a.test", &origin, "max:1 id:live1 statfreq:1000"));
    let first = slow(&ts, "a.test", "/s0".into());
    assert!(wait_until(Duration::from_secs(5), || origin.in_flight() == 1));
    assert_eq!(status(&ts, "a.test", "/refused"), 503);
    let shown = ctl(&ts, "show live1");
    for field in [
        "\"ok\":true",
        "\"id\":\"live1\"",
        "\"from\":\"http://a.test/\"",
        "\"max\":1",
        "\"stale\":0",
        "\"statfreq_ms\":1000",
        "\"inflight\":1",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    let set = ctl(&ts, "set live1 max=3");
    assert!(set.contains("\"ok\":true"), "{set}");
    assert!(
        set.contains("\"option\":\"max\"")
            && set.contains("\"old\":1")
            && set.contains("\"new\":3"),
        "{set}"
    );
    assert!(ts
        .diags()
        .contains("rule http://a.test/ id=live1: set live: max 1 -> 3"));
    // Raised: two more are admitted at once.
    let more: Vec<_> = (1..=2)
        .map(|i| slow(&ts, "a.test", format!("/s{i}")))
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || origin.in_flight() == 3),
        "{} at the origin",
        origin.in_flight()
    );
    assert_eq!(status(&ts, "a.test", "/full"), 503);
    // Lowered: nobody in flight is preempted, and nobody else gets in.
    assert!(ctl(&ts, "set live1 max=1").contains("\"ok\":true"));
    assert!(ctl(&ts, "show live1").contains("\"inflight\":3"));
    assert_eq!(status(&ts, "a.test", "/lowered"), 503);
    assert_eq!(first.join().expect("first"), 200);
    for h in more {
        assert_eq!(h.join().expect("more"), 200);
    }
    assert_eq!(origin.max_in_flight(), 3);
    assert_eq!(status(&ts, "a.test", "/again"), 200);
    // The counters are metrics: ATS publishes them some seconds later.
    assert!(
        wait_until(Duration::from_secs(20), || {
            let s = ctl(&ts, "show");
            s.contains("\"admitted\":4") && s.contains("\"unavailable\":3")
        }),
        "{}",
        ctl(&ts, "show")
    );
}

#[test]
fn set_stale_serves_stale_content_at_once() {
    let origin = Origin::start();
    let remap = format!("map http://fill.test/ {}\n", origin.url())
        + &rule("s.test", &origin, "max:0 id:stale1");
    let ts = start(remap);
    let r = ts
        .get("fill.test", "/a", &[("X-Origin-CC", "max-age=0")])
        .expect("fill");
    assert_eq!(r.status, 200);
    thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        status(&ts, "s.test", "/a"),
        503,
        "stale:0 serves nothing stale"
    );
    // The verb may be in the tag.
    let set = ts.plugin_msg("throttle.set", "stale1 stale=60");
    assert!(
        set.contains("\"ok\":true") && set.contains("\"new\":60"),
        "{set}"
    );
    let r = ts.get("s.test", "/a", &[]).expect("request");
    assert_eq!(r.status, 200, "served stale after set stale=60");
    assert_eq!(r.header("Warning"), Some("110 - \"Response is stale\""));
    assert!(ctl(&ts, "show stale1").contains("\"stale\":60"));
}

#[test]
fn bad_commands_are_answered_and_change_nothing() {
    let origin = Origin::start();
    let ts = start(rule("b.test", &origin, "max:2 stale:5 id:bad1"));
    for (command, error) in [
        (
            "shw",
            "unknown command 'shw': allowed show [ID], set ID max=N|auto stale=S",
        ),
        (
            "set bad1 max=auto",
            "set: max=auto on rule http://b.test/ (id bad1), whose max is fixed",
        ),
        ("set nobody max=3", "no rule with id 'nobody'; live: bad1"),
        (
            "set bad1 max=abc",
            "'max=abc' is invalid: allowed max= auto or a whole number from 0 to 4294967295",
        ),
        ("set bad1 max=-1", "'max=-1' is invalid"),
        (
            "set bad1 stale=99999999999",
            "'stale=99999999999' is invalid",
        ),
        (
            "set bad1 max=5 limit=3",
            "'limit=3' is invalid: allowed max= or stale=",
        ),
        ("set bad1", "set: wrong arguments 'bad1'"),
        ("show bad1 extra", "show: wrong arguments"),
    ] {
        let answer = ctl(&ts, command);
        assert!(answer.contains("\"ok\":false"), "{command}: {answer}");
        assert!(answer.contains(error), "{command}: {answer}");
    }
    let shown = ctl(&ts, "show bad1");
    assert!(
        shown.contains("\"max\":2") && shown.contains("\"stale\":5"),
        "nothing changed: {shown}"
    );
    assert!(ts.diags().contains("ctl: unknown command 'shw'"));
    assert!(!ts.diags().contains("set live"));
}

#[test]
fn loading_remap_config_again_restores_the_files_values() {
    let origin = Origin::start();
    let remap = |n: u32| format!("# {n}\n") + &rule("r.test", &origin, "max:2 id:reload1");
    let ts = start(remap(0));
    assert!(ctl(&ts, "set reload1 max=7 stale=9").contains("\"ok\":true"));
    let live = ctl(&ts, "show reload1");
    assert!(
        live.contains("\"max\":7") && live.contains("\"stale\":9"),
        "{live}"
    );
    ts.reload_remap(&remap(1)).expect("reload");
    let shown = ctl(&ts, "show reload1");
    assert!(
        shown.contains("\"max\":2") && shown.contains("\"stale\":0"),
        "the file wins: {shown}"
    );
    // One rule (the old one is no longer listed), built from the file.
    assert_eq!(shown.matches("\"id\":\"reload1\"").count(), 1, "{shown}");
    let diags = ts.diags();
    let set_at = diags.find("id=reload1: set live: max 2 -> 7, stale 0 -> 9");
    let reload_at = diags.rfind("rule http://r.test/ id=reload1 max=2 stale=0s");
    assert!(
        set_at.is_some() && reload_at > set_at,
        "both events in diags.log"
    );
    let results = client::burst(4, {
        let port = ts.port();
        move |i| {
            client::get(
                port,
                "r.test",
                &format!("/x{i}"),
                &[("X-Origin-Delay", "1000")],
            )
        }
    });
    assert_eq!(
        client::status_counts(&results),
        BTreeMap::from([(200, 2), (503, 2)])
    );
}

#[test]
fn messages_during_reloads_under_load_do_no_harm() {
    let origin = Origin::start();
    let remap = |n: u32| {
        format!("# {n}\n")
            + &rule("h.test", &origin, "max:3 id:harm")
            + &ats_tests::rule(
                "ip_throttle",
                "i.test",
                &origin,
                "--threshold=0 --instance=harm2",
            )
    };
    let mut ts = start(remap(0));
    let port = ts.port();
    let load = |host: &'static str| {
        thread::spawn(move || {
            let r = client::burst(30, move |i| {
                client::get(port, host, &format!("/p{i}"), &[("X-Origin-Delay", "100")])
            });
            client::status_counts(&r)
        })
    };
    let (throttled, ip) = (load("h.test"), load("i.test"));
    for n in 1..=4 {
        for (tag, cmd) in [
            ("throttle", "show"),
            ("throttle", "set harm max=4"),
            ("throttle", "bogus"),
            ("ip_throttle", "show 127.0.0.1"),
            ("ip_throttle", "reload config harm2"),
            ("ip_throttle", "unban 127.0.0.1"),
            ("ip_throttle", "reload deny"),
        ] {
            let out = ts.traffic_ctl(&["plugin", "msg", tag, cmd]);
            assert!(out.status.success(), "{tag} {cmd}: {out:?}");
        }
        ts.reload_remap(&remap(n)).expect("reload");
    }
    let t = throttled.join().expect("throttle load");
    assert_eq!(
        t.values().sum::<usize>(),
        30,
        "every request answered: {t:?}"
    );
    assert!(t.keys().all(|s| *s == 200 || *s == 503), "{t:?}");
    assert_eq!(ip.join().expect("ip load"), BTreeMap::from([(200, 30)]));
    assert!(ts.is_running(), "traffic_server survived");
    assert!(!ts.diags().contains("FATAL"));
    // Commands still answer after the reloads, from the last load's rules.
    let shown = ctl(&ts, "show harm");
    assert!(shown.contains("\"max\":3"), "{shown}");
    assert_eq!(shown.matches("\"id\":\"harm\"").count(), 1, "{shown}");
    let ip_shown = ts.plugin_msg("ip_throttle", "show 127.0.0.1 harm2");
    assert_eq!(ip_shown.matches("\"rule\":").count(), 1, "{ip_shown}");
}
