//! rate_limit.so's refusals as traffic_server logs them: ATS keeps only
//! about 1 KB of the message and ends it at a NUL, so a refusal names the
//! option first and shows the value shortened and escaped. (throttle.so's
//! cases are in throttle.rs.) Also: how long a metric name ATS 9.2 takes.

use ats_tests::{plugin, Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &[String]) -> String {
    let pp: String = params.iter().map(|p| format!(" @pparam={p}")).collect();
    format!(
        "map http://{host}/ {} @plugin={}{pp}\n",
        origin.url(),
        plugin("rate_limit")
    )
}

/// Starts traffic_server with one rule that must be refused; returns the
/// diags line that carries the plugin's message.
fn refusal(origin: &Origin, params: &[String]) -> String {
    let err = TrafficServer::builder()
        .remap(rule("bad.test", origin, params))
        .start()
        .err()
        .unwrap_or_else(|| panic!("{params:?} must fail the rule"));
    let line = err
        .diags
        .lines()
        .find(|l| l.contains("failed to create instance for plugin"))
        .unwrap_or_else(|| panic!("no refusal in diags.log: {err:?}"));
    assert!(line.contains("remap.config line 1"), "{line}");
    line.to_owned()
}

#[test]
fn a_10_kb_value_is_refused_naming_the_option_first() {
    let origin = Origin::start();
    let nines = "9".repeat(64);
    let line = refusal(&origin, &[format!("--limit={}", "9".repeat(10240))]);
    let want = format!(
        "[rate_limit] --limit has an invalid value '{nines}…' (10240 bytes): allowed an integer \
         from 1 to 4294967295 or auto"
    );
    assert!(line.ends_with(&want), "want {want:?} in {line:?}");

    let line = refusal(
        &origin,
        &[
            "--rate=10".to_owned(),
            format!("--burst={}", "9".repeat(10240)),
        ],
    );
    assert!(
        line.contains(&format!(
            "[rate_limit] --burst has an invalid value '{nines}…' (10240 bytes): allowed"
        )),
        "{line}"
    );
}

#[test]
fn a_control_character_in_a_value_is_escaped() {
    let origin = Origin::start();
    let line = refusal(&origin, &["--limit=1\u{1}5".to_owned()]);
    let want = "[rate_limit] --limit has an invalid value '1\\u{1}5': allowed an integer from 1 \
                to 4294967295 or auto";
    assert!(line.ends_with(want), "want {want:?} in {line:?}");
}

/// ATS 9.2 puts no bound on a metric's name (traffic_server registers and
/// traffic_ctl reads back names of 9 KB), so rate_limit bounds neither
/// `--tag` nor `--prefix`: the metrics of 1 KB ones are there.
#[test]
fn long_tags_and_prefixes_get_their_metrics() {
    let origin = Origin::start();
    let tag = "t".repeat(1000);
    let prefix = "p".repeat(1000);
    let ts = TrafficServer::builder()
        .remap(
            rule("tag.test", &origin, &[format!("--tag={tag}")])
                + &rule("prefix.test", &origin, &[format!("--prefix={prefix}")]),
        )
        .with_manager()
        .start()
        .expect("start");
    for host in ["tag.test", "prefix.test"] {
        assert_eq!(ts.get(host, "/", &[]).expect("request").status, 200);
    }
    for name in [
        format!("plugin.rate_limiter.remap.{tag}.admitted"),
        format!("{prefix}.remap.http.prefix.test.admitted"),
    ] {
        assert_eq!(ts.wait_metric(&name, 1), Ok(1), "{}", name.len());
    }
    assert!(!ts.diags().contains("cannot create metric"));
}
