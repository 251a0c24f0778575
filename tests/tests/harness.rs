//! The harness itself on the Traffic Server that `ATS_PREFIX` selects (9.2
//! or 10.x), with upstream's plugins only, so it runs while ours are being
//! ported: typed records reach ATS, `traffic_ctl` reads metrics and records,
//! `reload_remap` sees both outcomes, and `traffic_ctl plugin msg` delivers
//! multi-word data.

use std::time::Duration;

use ats_tests::{ats, client, Origin, TrafficServer};

#[test]
fn upstream_plugins_metrics_reload_and_plugin_msg() {
    let (major, minor) = ats::version();
    eprintln!(
        "Traffic Server {major}.{minor} from {}",
        ats::bin("traffic_server").display()
    );
    let rate_limit = ats::upstream_plugin("rate_limit");
    let block_errors = ats::upstream_plugin("block_errors");
    for p in [&rate_limit, &block_errors] {
        assert!(
            std::path::Path::new(p).is_file(),
            "{p} missing (Debian: trafficserver-experimental-plugins)"
        );
    }
    let origin = Origin::start();
    let rule = |host: &str, tag: &str| {
        format!(
            "map http://{host}/ {} @plugin={rate_limit} @pparam=--limit=1 @pparam=--queue=0 @pparam=--tag={tag}\n",
            origin.url()
        )
    };
    let mut ts = TrafficServer::builder()
        .remap(rule("a.test", "harness"))
        .plugin_config(format!("{block_errors}\n"))
        .debug_tags("block_errors|rate_limit")
        // A string that needs quoting in YAML, and a 9.2 name renamed in 10.
        .record("proxy.config.proxy_name", "STRING a#1 \"b\" c")
        .record("proxy.config.exec_thread.autoconfig", "INT 0")
        .with_manager()
        .start()
        .expect("start");
    assert!(ts.is_running());
    assert!(ts.server_pid().is_some());

    let r = ts.get("a.test", "/one", &[]).expect("request");
    assert_eq!(r.status, 200, "{r:?}");

    // Three at once against --limit=1 --queue=0: the extra ones are refused
    // and counted.
    let port = ts.port();
    let results = client::burst(3, move |i| {
        client::get(
            port,
            "a.test",
            &format!("/b{i}"),
            &[("X-Origin-Delay", "500")],
        )
    });
    let refused = results
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status != 200))
        .count() as i64;
    assert!(refused >= 1, "{:?}", client::status_counts(&results));
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.remap.harness.rejected", refused),
        Ok(refused)
    );
    assert_eq!(
        ts.metric("plugin.rate_limiter.remap.no_such.rejected"),
        None
    );

    let get = |name: &str| {
        String::from_utf8_lossy(&ts.traffic_ctl(&["config", "get", name]).stdout).into_owned()
    };
    assert_eq!(
        get("proxy.config.proxy_name").trim(),
        "proxy.config.proxy_name: a#1 \"b\" c"
    );
    let autoconfig = if ats::is_10() {
        "proxy.config.exec_thread.autoconfig.enabled"
    } else {
        "proxy.config.exec_thread.autoconfig"
    };
    assert_eq!(get(autoconfig).trim(), format!("{autoconfig}: 0"));

    // A good reload adds a rule; a bad one is refused and the rules stay.
    let both = format!("{}{}", rule("a.test", "harness"), rule("b.test", "b"));
    ts.reload_remap(&both).expect("reload");
    let r = ts.get("b.test", "/two", &[]).expect("request");
    assert_eq!(r.status, 200, "{r:?}");
    let bad = format!(
        "{both}map http://c.test/ {} @plugin=/nonexistent.so\n",
        origin.url()
    );
    let err = ts
        .reload_remap(&bad)
        .expect_err("a missing plugin is refused");
    assert!(err.contains("failed to load"), "{err}");
    let r = ts.get("b.test", "/three", &[]).expect("request");
    assert_eq!(r.status, 200, "{r:?}");

    // One argument with spaces reaches the plugin whole.
    let out = ts.traffic_ctl(&["plugin", "msg", "block_errors.enabled", "1 two  words"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        ts.wait_for_log("diags.log", Duration::from_secs(10), |t| t
            .contains("data=1 two  words")),
        "{}",
        ts.diags()
    );
    assert!(ts.is_running());
}
