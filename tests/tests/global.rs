//! rate_limit.so's global mode against a real traffic_server: TLS
//! connections limited per SNI at the client hello (plugin.config
//! `rate_limit.so global.yaml`), with real TLS clients (tests/tls/client.py).

use std::time::Duration;

use ats_tests::tls::{self, holders, Client};
use ats_tests::{plugin, TrafficServer};

/// A traffic_server with a TLS port and the global mode loading `yaml`.
fn start(yaml: &str) -> TrafficServer {
    start_with(yaml, &[])
}

fn start_with(yaml: &str, records: &[(&str, &str)]) -> TrafficServer {
    let mut b = TrafficServer::builder()
        .tls()
        .with_manager()
        .plugin_config(format!("{} global.yaml\n", plugin("rate_limit")))
        .config_file("global.yaml", yaml);
    for (k, v) in records {
        b = b.record(k, v);
    }
    b.start().expect("traffic_server start")
}

#[test]
fn limit_refuses_the_connection_over_it_and_frees_the_slot_at_close() {
    let ts = start("selector:\n  - sni: a.test\n    limit: 2\n");
    let mut clients = holders(2, Some("a.test"), "127.0.0.1", "release");
    clients.push(
        Client::new(Some("a.test"))
            .sleep_ms(500)
            .hello()
            .signal("release"),
    );
    // Another name is not limited by a.test's selector.
    clients.push(Client::new(Some("b.test")).sleep_ms(500).hello());
    clients.push(
        Client::new(Some("a.test"))
            .wait_for("release")
            .sleep_ms(500)
            .hello(),
    );
    let out = tls::run(ts.tls_port(), 20, &clients);
    assert!(out[0].passed() && out[1].passed(), "{out:?}");
    assert!(
        out[2].refused(),
        "the third connection is over the limit: {out:?}"
    );
    assert!(out[3].passed(), "{out:?}");
    assert!(out[4].passed(), "the slots came back at close: {out:?}");
    let _ = Duration::ZERO;
}
