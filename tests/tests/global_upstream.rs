//! The global mode beside upstream's: the same YAML, the same clients,
//! against our rate_limit.so and upstream's 10.x rate_limit.so (whose
//! global mode reads this YAML; 9.2's takes command-line options, so on
//! 9.2 only ours runs). Where upstream works, ours does too; where
//! upstream fails (`rate` is stored as the limit, an `exclude`d client is
//! refused), the test says so.

use ats_tests::tls::{self, holders, one_by_one, Client, Outcome};
use ats_tests::{ats, plugin, TrafficServer};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Which {
    Ours,
    Upstream,
}

/// Ours, and upstream's where its global mode reads this YAML (10.x).
fn both() -> Vec<Which> {
    if ats::is_10() {
        vec![Which::Ours, Which::Upstream]
    } else {
        eprintln!("upstream's 9.2 global mode takes options, not this YAML: ours only");
        vec![Which::Ours]
    }
}

/// A traffic_server whose plugin.config loads `which`'s rate_limit.so with
/// `yaml` (by absolute path: upstream opens it as given).
fn start(which: Which, yaml: &str) -> (TrafficServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let so = match which {
        Which::Ours => plugin("rate_limit"),
        Which::Upstream => ats::upstream_plugin("rate_limit"),
    };
    let file = dir.path().join("etc/global.yaml");
    let ts = TrafficServer::builder()
        .root(dir.path())
        .tls()
        .with_manager()
        .plugin_config(format!("{so} {}\n", file.display()))
        .config_file("global.yaml", yaml)
        .start()
        .unwrap_or_else(|e| panic!("{which:?}: traffic_server start: {e:?}"));
    (ts, dir)
}

fn run(ts: &TrafficServer, clients: &[Client]) -> Vec<Outcome> {
    tls::run(ts.tls_port(), 20, clients)
}

#[test]
fn limit_and_aliases_work_in_both() {
    for which in both() {
        let (ts, _dir) = start(
            which,
            "selector:\n  - sni: a.test\n    aliases: [b.test]\n    limit: 1\n",
        );
        let clients = vec![
            Client::new(Some("a.test"))
                .hello()
                .signal("held")
                .sleep_ms(1000),
            Client::new(Some("a.test")).wait_for("held").hello(),
            Client::new(Some("b.test")).wait_for("held").hello(),
            Client::new(Some("c.test")).wait_for("held").hello(),
        ];
        let out = run(&ts, &clients);
        assert!(out[0].passed(), "{which:?}: {out:?}");
        assert!(out[1].refused() && out[2].refused(), "{which:?}: {out:?}");
        assert!(out[3].passed(), "{which:?}: {out:?}");
    }
}

/// Both resume a parked handshake when a connection closes: ours at once,
/// upstream at its next 300 ms sweep.
#[test]
fn queue_resume_works_in_both() {
    for which in both() {
        let (ts, _dir) = start(
            which,
            "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 5\n      max_age: 10\n",
        );
        let clients = vec![
            Client::new(Some("a.test"))
                .hello()
                .signal("held")
                .sleep_ms(1000)
                .close(),
            Client::new(Some("a.test")).wait_for("held").hello(),
        ];
        let out = run(&ts, &clients);
        assert!(out[0].passed() && out[1].passed(), "{which:?}: {out:?}");
        let waited = out[1].handshake_ms().unwrap_or(0);
        let most = match which {
            Which::Ours => 1500,
            Which::Upstream => 1800,
        };
        assert!(
            (900..most).contains(&waited),
            "{which:?}: resumed after {waited} ms"
        );
    }
}

/// `rate: 1` with 6 connections one after the other: ours lets the burst
/// (1) through, and one more per second they take; upstream lets all 6
/// through (5 if one is still closing as the next arrives), as it stores
/// `rate` as the limit of concurrent connections.
#[test]
fn rate_is_a_rate_in_ours_and_a_limit_upstream() {
    for which in both() {
        let (ts, _dir) = start(which, "selector:\n  - sni: a.test\n    rate: 1\n");
        let out = run(&ts, &one_by_one(6, Some("a.test"), "127.0.0.1", "q"));
        let passed = out.iter().filter(|o| o.passed()).count();
        let took_s = out.iter().filter_map(|o| o.done_ms).max().unwrap_or(0) / 1000;
        match which {
            Which::Ours => assert!(passed <= 1 + took_s as usize && passed < 6, "ours: {out:?}"),
            // All 6, or 5 when a connection is still closing as the next
            // arrives (its limit of 1 then refuses): far more than a rate.
            Which::Upstream => assert!(
                passed >= 5 && passed > 1 + took_s as usize,
                "upstream's defect: {out:?}"
            ),
        }
    }
}

/// An `exclude`d client with the selector full: ours lets it through;
/// upstream fails its handshake (the opposite of its docs).
#[test]
fn exclude_exempts_in_ours_and_refuses_upstream() {
    for which in both() {
        let (ts, _dir) = start(
            which,
            "selector:\n  - sni: a.test\n    limit: 1\n    exclude: inside\n\
             lists:\n  - name: inside\n    cidr: [127.0.0.2/32]\n",
        );
        let mut clients = vec![Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .wait_for("release")];
        clients.extend(
            holders(3, Some("a.test"), "127.0.0.2", "release")
                .into_iter()
                .map(|c| c.wait_for("held")),
        );
        clients.push(
            Client::new(None)
                .wait_for("held")
                .sleep_ms(500)
                .signal("release"),
        );
        let out = run(&ts, &clients);
        assert!(out[0].passed(), "{which:?}: {out:?}");
        let excluded_passed = out[1..4].iter().filter(|o| o.passed()).count();
        match which {
            Which::Ours => assert_eq!(excluded_passed, 3, "ours: {out:?}"),
            Which::Upstream => assert_eq!(excluded_passed, 0, "upstream's defect: {out:?}"),
        }
    }
}

/// Under pressure (6 of 10 held), a client that keeps coming climbs the
/// sieve and is refused, while a newcomer gets in: in both.
#[test]
fn ip_rep_refuses_the_heavy_client_in_both() {
    for which in both() {
        let (ts, _dir) = start(
            which,
            "selector:\n  - sni: a.test\n    limit: 10\n    ip-rep: main\n\
             ip-rep:\n  - name: main\n    buckets: 10\n    size: 12\n    percentage: 50\n",
        );
        let mut clients: Vec<Client> = (3..9)
            .map(|i| {
                Client::new(Some("a.test"))
                    .from(&format!("127.0.0.{i}"))
                    .hello()
                    .signal(&format!("h{i}"))
                    .wait_for("release")
            })
            .collect();
        // The heavy client comes 15 times, one after the other, once all are held.
        for i in 0..15 {
            let c = Client::new(Some("a.test")).from("127.0.0.2");
            let c = match i {
                0 => (3..9).fold(c, |c, h| c.wait_for(&format!("h{h}"))),
                _ => c.wait_for(&format!("heavy-{}", i - 1)),
            };
            clients.push(c.hello().close().signal(&format!("heavy-{i}")));
        }
        clients.push(
            Client::new(Some("a.test"))
                .from("127.0.0.20")
                .wait_for("heavy-14")
                .hello()
                .signal("release"),
        );
        let out = run(&ts, &clients);
        assert!(out[..6].iter().all(Outcome::passed), "{which:?}: {out:?}");
        let heavy = &out[6..21];
        assert!(
            heavy.last().is_some_and(Outcome::refused),
            "{which:?}: {heavy:?}"
        );
        assert!(
            heavy.first().is_some_and(Outcome::passed),
            "{which:?}: {heavy:?}"
        );
        assert!(out[21].passed(), "{which:?}: the newcomer: {out:?}");
    }
}
