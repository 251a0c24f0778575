//! Every plugin's metrics reach operators under the same names and values
//! through both of ATS's outlets: `traffic_ctl metric get` and upstream's
//! stats_over_http plugin (`/_stats`). Runs on 9.2 and 10.x alike (on 10.x
//! `TSStatCreate` ignores its type and sync arguments, so this is where a
//! difference would show).

use std::collections::BTreeMap;
use std::time::Duration;

use ats_tests::{ats, client, rule, wait_until, Origin, TrafficServer};

/// `name -> value` of stats_over_http's JSON (`{"global": {"name": "value"}}`).
fn stats_over_http(ts: &TrafficServer) -> BTreeMap<String, i64> {
    let r = client::get(ts.port(), "stats.test", "/_stats", &[]).expect("GET /_stats");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let json: serde_json::Value = serde_json::from_slice(&r.body).expect("stats JSON");
    json["global"]
        .as_object()
        .expect("a global object")
        .iter()
        .filter_map(|(k, v)| {
            let n = v.as_str().and_then(|s| s.parse().ok()).or(v.as_i64())?;
            Some((k.clone(), n))
        })
        .collect()
}

#[test]
fn plugin_metrics_have_the_same_names_and_values_in_traffic_ctl_and_stats_over_http() {
    let origin = Origin::start();
    let remap = [
        rule("rate_limit", "rl.test", &origin, "--limit=5 --queue=0"),
        rule("throttle", "th.test", &origin, "id:met max:5"),
        rule("ip_throttle", "ip.test", &origin, "--threshold=0"),
    ]
    .concat();
    let ts = TrafficServer::builder()
        .remap(remap)
        .plugin_config(format!(
            "{} _stats\n",
            ats::upstream_plugin("stats_over_http")
        ))
        .with_manager()
        .start()
        .expect("start");
    for host in ["rl.test", "th.test", "ip.test"] {
        for i in 0..3 {
            let r = ts.get(host, &format!("/m{i}"), &[]).expect("GET");
            assert_eq!(r.status, 200, "{host}");
        }
    }
    // Counters every plugin bumped three times, one per request.
    let expected = [
        "plugin.rate_limiter.remap.http.rl.test.admitted",
        "plugin.throttle.met.admitted",
        "plugin.ip_throttle.http.ip.test.passed",
    ];
    for name in expected {
        assert_eq!(
            ts.wait_metric(name, 3),
            Ok(3),
            "traffic_ctl metric get {name}"
        );
    }
    // stats_over_http reads the same records; on 9.2 it may lag traffic_ctl
    // by a sync cycle, so wait for it too (bounded).
    let mut stats = BTreeMap::new();
    let synced = wait_until(Duration::from_secs(15), || {
        stats = stats_over_http(&ts);
        expected.iter().all(|n| stats.get(*n) == Some(&3))
    });
    assert!(
        synced,
        "stats_over_http: {:?}",
        stats
            .iter()
            .filter(|(k, _)| k.starts_with("plugin."))
            .collect::<Vec<_>>()
    );
    // Every plugin metric listed by traffic_ctl is in stats_over_http, by
    // the same name (gauges and counters alike).
    let listed = String::from_utf8_lossy(
        &ts.traffic_ctl(&["metric", "match", "rate_limiter|throttle"])
            .stdout,
    )
    .into_owned();
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() >= 15, "traffic_ctl metric match: {listed}");
    for name in names {
        assert!(
            stats.contains_key(name),
            "{name} is in traffic_ctl but not in stats_over_http"
        );
    }
}
