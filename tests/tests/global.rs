//! rate_limit.so's global mode against a real traffic_server: TLS
//! connections limited per SNI at the client hello (plugin.config
//! `rate_limit.so global.yaml`), with real TLS clients
//! (tests/tls/client.py). Each behaviour of docs/rate_limit.md's "Global
//! mode"; the comparison with upstream's 10.x plugin is global_upstream.rs.

use std::fs;
use std::time::Duration;

use ats_tests::tls::{self, holders, Client, Outcome};
use ats_tests::{plugin, wait_until, TrafficServer};
use serde_json::Value;

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

fn run(ts: &TrafficServer, clients: &[Client]) -> Vec<Outcome> {
    tls::run(ts.tls_port(), 20, clients)
}

/// The global mode's selectors as `show` answers.
fn selectors(ts: &TrafficServer) -> Vec<Value> {
    let text = ts.plugin_msg("rate_limit", "show");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["global"]["selectors"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no selectors in {text}"))
}

fn selector(ts: &TrafficServer, sni: &str) -> Value {
    selectors(ts)
        .into_iter()
        .find(|s| s["sni"] == sni)
        .unwrap_or_else(|| panic!("no selector {sni}"))
}

/// Waits until the selector holds and parks nothing.
fn assert_drained(ts: &TrafficServer, sni: &str) {
    let mut last = Value::Null;
    let drained = wait_until(Duration::from_secs(10), || {
        last = selector(ts, sni);
        last["active"] == 0 && last["waiting"] == 0
    });
    assert!(drained, "{sni} did not drain: {last}");
}

/// Waits until the selector holds no connection (the clients' closes have
/// reached the server).
fn wait_closed(ts: &TrafficServer, sni: &str) {
    let closed = wait_until(Duration::from_secs(10), || selector(ts, sni)["active"] == 0);
    assert!(closed, "{sni}: {}", selector(ts, sni));
}

#[test]
fn limit_refuses_the_connection_over_it_and_frees_the_slot_at_close() {
    let ts = start("selector:\n  - sni: a.test\n    limit: 2\n");
    let mut clients = holders(2, Some("a.test"), "127.0.0.1", "release");
    clients.push(
        Client::new(Some("a.test"))
            .after_held(2, "release")
            .hello()
            .signal("over"),
    );
    // Another name is not limited by a.test's selector.
    clients.push(
        Client::new(Some("b.test"))
            .after_held(2, "release")
            .hello()
            .wait_for("over")
            .signal("release"),
    );
    let out = run(&ts, &clients);
    assert!(out[0].passed() && out[1].passed(), "{out:?}");
    assert!(out[2].refused(), "over the limit: {out:?}");
    assert!(out[3].passed(), "{out:?}");
    // The slots come back at close.
    wait_closed(&ts, "a.test");
    let out = run(&ts, &[Client::new(Some("a.test")).hello()]);
    assert!(out[0].passed(), "{out:?}");
    let s = selector(&ts, "a.test");
    assert_eq!(
        (&s["admitted"], &s["refused"]["full"]),
        (&3.into(), &1.into()),
        "{s}"
    );
    assert_drained(&ts, "a.test");
}

/// `rate` is a rate (upstream stores it as the limit): one every 4 s with
/// a burst of 2 lets 2 of 6 quick handshakes through, and one more once a
/// token is back.
#[test]
fn rate_is_new_connections_per_second() {
    let ts = start("selector:\n  - sni: a.test\n    rate: 0.25\n    burst: 2\n");
    let quick: Vec<Client> = (0..6)
        .map(|_| Client::new(Some("a.test")).hello().close())
        .collect();
    let out = run(&ts, &quick);
    let passed = out.iter().filter(|o| o.passed()).count();
    let refused = out.iter().filter(|o| o.refused()).count();
    // 2, or 3 if the six took over 4 s (a loaded machine).
    let took = out.iter().filter_map(|o| o.done_ms).max().unwrap_or(0);
    let allowed = 2 + usize::from(took >= 4000);
    assert!(
        passed >= 2 && passed <= allowed && passed + refused == 6,
        "{out:?}"
    );
    std::thread::sleep(Duration::from_millis(4200));
    let out = run(&ts, &[Client::new(Some("a.test")).hello()]);
    assert!(out[0].passed(), "a token came back: {out:?}");
    assert_eq!(selector(&ts, "a.test")["refused"]["rate"], refused);
}

/// A parked handshake resumes the moment a connection closes (no sweep),
/// and one parked too long is refused at `max-age`.
#[test]
fn a_queued_handshake_resumes_at_close_and_expires_at_max_age() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 5\n      max-age: 5\n\
         \x20 - sni: b.test\n    limit: 1\n    queue:\n      max_age: 1\n",
    );
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(1500)
            .close()
            .signal("closed"),
        Client::new(Some("a.test"))
            .wait_for("held")
            .hello()
            .sleep_ms(300),
        Client::new(Some("b.test")).hello().sleep_ms(3000).close(),
        Client::new(Some("b.test")).sleep_ms(200).hello(),
    ];
    let out = run(&ts, &clients);
    assert!(out[0].passed() && out[1].passed(), "{out:?}");
    // Parked for the holder's 1.5 s, resumed within 250 ms of its close.
    let waited = out[1].handshake_ms().unwrap_or(0);
    assert!(
        (1300..2000).contains(&waited),
        "resumed after {waited} ms: {out:?}"
    );
    assert!(out[2].passed(), "{out:?}");
    assert!(out[3].refused(), "expired: {out:?}");
    let waited = out[3].handshake_ms().unwrap_or(0);
    assert!((900..2500).contains(&waited), "expired after {waited} ms");
    let a = selector(&ts, "a.test");
    assert_eq!((&a["queued"], &a["resumed"]), (&1.into(), &1.into()), "{a}");
    let b = selector(&ts, "b.test");
    assert_eq!(b["refused"]["expired"], 1, "{b}");
    assert_drained(&ts, "a.test");
    assert_drained(&ts, "b.test");
}

/// A client that gives up while parked gives its turn away: the freed slot
/// skips it for the next parked handshake.
#[test]
fn a_client_that_leaves_the_queue_gives_its_turn_away() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 5\n      max-age: 10\n",
    );
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(1500)
            .close(),
        Client::new(Some("a.test"))
            .wait_for("held")
            .hello_within(500)
            .signal("gone"),
        Client::new(Some("a.test")).wait_for("gone").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(
        out[0].passed() && out[1].timed_out() && out[2].passed(),
        "{out:?}"
    );
    let s = selector(&ts, "a.test");
    assert_eq!(
        (&s["abandoned"], &s["resumed"]),
        (&1.into(), &1.into()),
        "{s}"
    );
    assert_drained(&ts, "a.test");
}

/// A queue without `max-age` still never outlives Traffic Server's own
/// handshake timeout: the parked handshake is refused a second before it,
/// and the server goes on (a later re-enable would touch a freed connection).
#[test]
fn a_parked_handshake_never_outlives_the_handshake_timeout() {
    let ts = start_with(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 5\n",
        &[("proxy.config.ssl.handshake_timeout_in", "INT 3")],
    );
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(5000),
        Client::new(Some("a.test")).wait_for("held").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(out[0].passed(), "{out:?}");
    assert!(out[1].refused(), "{out:?}");
    let waited = out[1].handshake_ms().unwrap_or(0);
    assert!((1500..3000).contains(&waited), "refused after {waited} ms");
    // The server is up and the slot is free again.
    let out = run(&ts, &[Client::new(Some("a.test")).hello()]);
    assert!(out[0].passed(), "{out:?}");
    assert_eq!(selector(&ts, "a.test")["refused"]["expired"], 1);
}

/// A handshake timeout raised at run time (it applies from a restart
/// only) does not stretch a parked handshake past the timeout ATS gave its
/// connection: the deadline follows the budget read at start, and the
/// park holds ATS off its own timeout meanwhile. (Before, on 10.1, the
/// park read the new 20 s, ATS closed the connection at 4.8 s without
/// telling the plugin, and a slot freed later went to the freed
/// connection: a segfault. 9.2's records keep the old value until a
/// restart, so there the test passed before too.)
#[test]
fn a_changed_handshake_timeout_cannot_outrun_a_park() {
    let ts = start_with(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 5\n",
        &[("proxy.config.ssl.handshake_timeout_in", "INT 4")],
    );
    let pid = ts.server_pid();
    let set = ts.traffic_ctl(&[
        "config",
        "set",
        "proxy.config.ssl.handshake_timeout_in",
        "20",
    ]);
    assert!(set.status.success(), "{set:?}");
    assert!(ts.traffic_ctl(&["config", "reload"]).status.success());
    // Until the new value is what the records say (9.2: through the manager).
    let raised = wait_until(Duration::from_secs(15), || {
        let out = ts.traffic_ctl(&["config", "get", "proxy.config.ssl.handshake_timeout_in"]);
        String::from_utf8_lossy(&out.stdout)
            .trim_end()
            .ends_with(" 20")
    });
    assert!(raised, "the record did not change");
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(6000)
            .close(),
        Client::new(Some("a.test")).wait_for("held").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(out[0].passed(), "{out:?}");
    assert!(out[1].refused(), "{out:?}");
    let waited = out[1].handshake_ms().unwrap_or(0);
    assert!((1500..3900).contains(&waited), "refused after {waited} ms");
    // The holder's close (6 s) finds nobody parked; the server is the same
    // process and serves.
    std::thread::sleep(Duration::from_millis(500));
    let out = run(&ts, &[Client::new(Some("a.test")).hello()]);
    assert!(out[0].passed(), "{out:?}");
    assert_eq!(ts.server_pid(), pid, "traffic_server restarted");
}

#[test]
fn aliases_share_the_selector() {
    let ts = start("selector:\n  - sni: a.test\n    aliases: [b.test, C.Test]\n    limit: 1\n");
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(1000),
        Client::new(Some("b.test")).wait_for("held").hello(),
        Client::new(Some("c.test")).wait_for("held").hello(),
        Client::new(Some("d.test")).wait_for("held").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(out[0].passed() && out[3].passed(), "{out:?}");
    assert!(out[1].refused() && out[2].refused(), "{out:?}");
}

/// An excluded client is never refused and never counted (upstream fails
/// its handshake instead).
#[test]
fn exclude_lets_a_listed_client_through_uncounted() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 1\n    exclude: inside\n\
         lists:\n  - name: inside\n    cidr: [127.0.0.2/32]\n",
    );
    let mut clients = holders(3, Some("a.test"), "127.0.0.2", "release");
    clients.push(
        Client::new(Some("a.test"))
            .after_held(3, "release")
            .hello()
            .signal("held")
            .wait_for("release"),
    );
    clients.push(
        Client::new(Some("a.test"))
            .wait_for("held")
            .hello()
            .signal("release"),
    );
    let out = run(&ts, &clients);
    assert!(out[..3].iter().all(Outcome::passed), "excluded: {out:?}");
    assert!(out[3].passed(), "the excluded ones took no slot: {out:?}");
    assert!(out[4].refused(), "{out:?}");
    let s = selector(&ts, "a.test");
    assert_eq!(
        (&s["excluded"], &s["admitted"]),
        (&3.into(), &1.into()),
        "{s}"
    );
}

#[test]
fn the_catch_all_and_connections_without_sni() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 5\n  - sni: '*'\n    limit: 1\n  - sni: ''\n    limit: 1\n",
    );
    let clients = vec![
        Client::new(None).hello().signal("held-none").sleep_ms(1000),
        Client::new(None).wait_for("held-none").hello(),
        Client::new(Some("x.test"))
            .hello()
            .signal("held-x")
            .sleep_ms(1000),
        Client::new(Some("y.test")).wait_for("held-x").hello(),
        Client::new(Some("a.test")).wait_for("held-x").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(
        out[0].passed() && out[2].passed() && out[4].passed(),
        "{out:?}"
    );
    assert!(out[1].refused(), "no SNI: the \"\" selector: {out:?}");
    assert!(out[3].refused(), "any other name: \"*\": {out:?}");
    // A parked handshake without an SNI is refused at its deadline too (the
    // refusal happens at SERVERNAME, which runs without an SNI as well).
    let ts2 = start("selector:\n  - sni: ''\n    limit: 1\n    queue:\n      max-age: 1\n");
    let clients = vec![
        Client::new(None).hello().signal("held").sleep_ms(2500),
        Client::new(None).wait_for("held").hello(),
    ];
    let out = run(&ts2, &clients);
    assert!(out[0].passed() && out[1].refused(), "{out:?}");
    let waited = out[1].handshake_ms().unwrap_or(0);
    assert!((900..2000).contains(&waited), "refused after {waited} ms");
    // Without a "" selector, the catch-all takes connections without an SNI.
    let ts = start("selector:\n  - sni: default\n    limit: 1\n");
    let clients = vec![
        Client::new(Some("x.test"))
            .hello()
            .signal("held")
            .sleep_ms(1000),
        Client::new(None).wait_for("held").hello(),
    ];
    let out = run(&ts, &clients);
    assert!(out[0].passed() && out[1].refused(), "{out:?}");
}

/// Under pressure the sieve refuses the address that came most while a
/// newcomer passes; with perma-block the same address is blocked sooner.
#[test]
fn ip_rep_refuses_the_heavy_client_and_lets_a_light_one_in() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 10\n    ip-rep: plain\n\
         \x20 - sni: b.test\n    limit: 10\n    ip-rep: perma\n\
         ip-rep:\n  - name: plain\n    buckets: 10\n    size: 12\n    percentage: 50\n\
         \x20 - name: perma\n    buckets: 10\n    size: 12\n    percentage: 50\n    perma-block:\n      limit: 3\n      threshold: 10\n",
    );
    // No pressure yet: the heavy client (127.0.0.2) comes and goes.
    for sni in ["a.test", "b.test"] {
        let quick = tls::one_by_one(20, Some(sni), "127.0.0.2", sni);
        let out = run(&ts, &quick);
        assert!(out.iter().all(Outcome::passed), "{out:?}");
    }
    // 6 light clients hold connections: 60 % of the limit.
    let mut clients = Vec::new();
    for sni in ["a.test", "b.test"] {
        for i in 3..9 {
            clients.push(
                Client::new(Some(sni))
                    .from(&format!("127.0.0.{i}"))
                    .hello()
                    .signal(&format!("{sni}{i}"))
                    .wait_for("release")
                    .close(),
            );
        }
    }
    let after = |c: Client| -> Client {
        (3..9).fold(c, |c, i| {
            c.wait_for(&format!("a.test{i}"))
                .wait_for(&format!("b.test{i}"))
        })
    };
    let n = clients.len();
    for sni in ["a.test", "b.test"] {
        clients.push(after(Client::new(Some(sni)).from("127.0.0.2")).hello());
        clients.push(after(Client::new(Some(sni)).from("127.0.0.20")).hello());
    }
    clients.push(after(Client::new(None)).sleep_ms(300).signal("release"));
    let out = run(&ts, &clients);
    assert!(out[..n].iter().all(Outcome::passed), "{out:?}");
    assert!(out[n].refused(), "heavy on a.test: {:?}", &out[n..]);
    assert!(out[n + 1].passed(), "light on a.test: {:?}", &out[n..]);
    assert!(out[n + 2].refused(), "heavy on b.test: {:?}", &out[n..]);
    assert!(out[n + 3].passed(), "light on b.test: {:?}", &out[n..]);
    assert_eq!(selector(&ts, "a.test")["refused"]["ip_rep"], 1);
}

/// A heavy client ranked too cold to be refused at this pressure is
/// refused once perma-blocked.
#[test]
fn perma_block_refuses_an_address_the_ranking_alone_would_not() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 10\n    ip-rep: plain\n\
         \x20 - sni: b.test\n    limit: 10\n    ip-rep: perma\n\
         ip-rep:\n  - name: plain\n    buckets: 10\n    size: 12\n    percentage: 50\n\
         \x20 - name: perma\n    buckets: 10\n    size: 12\n    percentage: 50\n    perma-block:\n      limit: 3\n      threshold: 10\n",
    );
    // 5 visits: bucket 6 of 10, 5 hits (> perma-block's limit of 3).
    for sni in ["a.test", "b.test"] {
        let quick = tls::one_by_one(5, Some(sni), "127.0.0.2", sni);
        let out = run(&ts, &quick);
        assert!(out.iter().all(Outcome::passed), "{out:?}");
    }
    let mut clients = Vec::new();
    for sni in ["a.test", "b.test"] {
        // 6 of 10 held: pressure 2, which refuses buckets 0 and 1 only.
        for i in 3..9 {
            clients.push(
                Client::new(Some(sni))
                    .from(&format!("127.0.0.{i}"))
                    .hello()
                    .signal(&format!("{sni}{i}"))
                    .wait_for("release")
                    .close(),
            );
        }
    }
    let n = clients.len();
    for sni in ["a.test", "b.test"] {
        let c = (3..9).fold(Client::new(Some(sni)).from("127.0.0.2"), |c, i| {
            c.wait_for(&format!("{sni}{i}"))
        });
        clients.push(c.hello().signal(&format!("{sni}-done")));
    }
    clients.push(
        Client::new(None)
            .wait_for("a.test-done")
            .wait_for("b.test-done")
            .signal("release"),
    );
    let out = run(&ts, &clients);
    assert!(out[..n].iter().all(Outcome::passed), "{out:?}");
    assert!(out[n].passed(), "ranked only: {:?}", &out[n..]);
    assert!(out[n + 1].refused(), "perma-blocked: {:?}", &out[n..]);
}

#[test]
fn per_ip_limits_each_client_address() {
    let ts = start("selector:\n  - sni: a.test\n    limit: 100\n    per-ip:\n      limit: 2\n");
    let mut clients = holders(2, Some("a.test"), "127.0.0.2", "release");
    clients.push(
        Client::new(Some("a.test"))
            .from("127.0.0.2")
            .after_held(2, "release")
            .hello()
            .signal("third"),
    );
    clients.push(
        Client::new(Some("a.test"))
            .from("127.0.0.3")
            .after_held(2, "release")
            .hello()
            .wait_for("third")
            .signal("release"),
    );
    let out = run(&ts, &clients);
    assert!(
        out[0].passed() && out[1].passed() && out[3].passed(),
        "{out:?}"
    );
    assert!(out[2].refused(), "a third from 127.0.0.2: {out:?}");
    let s = selector(&ts, "a.test");
    assert_eq!(s["refused"]["per_ip"], 1, "{s}");
    assert_drained(&ts, "a.test");
}

/// `traffic_ctl config reload` and the `reload` command reread the file:
/// a good one serves at once (keeping the connections open), a bad one is
/// refused with its line and the loaded one goes on.
#[test]
fn reloads_good_and_bad() {
    let ts = start("selector:\n  - sni: a.test\n    limit: 1\n");
    let yaml = ts.config_dir().join("global.yaml");
    // One connection held through the reloads.
    let holder = std::thread::spawn({
        let port = ts.tls_port();
        move || {
            tls::run(
                port,
                40,
                &[Client::new(Some("a.test")).hello().sleep_ms(25000)],
            )
        }
    });
    assert!(wait_until(Duration::from_secs(5), || selector(
        &ts, "a.test"
    )["active"]
        == 1));
    let one = || run(&ts, &[Client::new(Some("a.test")).hello()])[0].clone();
    assert!(one().refused());
    fs::write(&yaml, "selector:\n  - sni: a.test\n    limit: 3\n").unwrap();
    let out = ts.traffic_ctl(&["config", "reload"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        wait_until(Duration::from_secs(15), || selector(&ts, "a.test")["limit"]
            == 3),
        "reloaded: {}",
        ts.diags()
    );
    // The held connection counts against the new limit.
    assert_eq!(selector(&ts, "a.test")["active"], 1);
    // And it is among the connections Traffic Server has open (9.2's
    // process metrics reach the records up to ~10 s late).
    let mut v = Value::Null;
    let counted = wait_until(Duration::from_secs(15), || {
        v = serde_json::from_str(&ts.plugin_msg("rate_limit", "show")).unwrap_or_default();
        v["global"]["ats_connections"]
            .as_i64()
            .is_some_and(|n| n >= 1)
    });
    assert!(counted, "{v}");
    assert!(one().passed());
    // A bad file: refused with its line; the loaded one goes on.
    fs::write(&yaml, "selector:\n  - sni: a.test\n    limit: lots\n").unwrap();
    let answer = ts.plugin_msg("rate_limit", "reload");
    assert!(
        answer.contains("global.yaml:3: selector 'a.test': limit: 'lots' is not a whole number"),
        "{answer}"
    );
    assert!(ts
        .diags()
        .contains("reload refused, the loaded file keeps serving"));
    assert_eq!(selector(&ts, "a.test")["limit"], 3);
    assert!(one().passed());
    let out = holder.join().expect("holder");
    assert!(out[0].passed(), "{out:?}");
}

#[test]
fn metrics_are_upstreams_names_and_ours() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 1\n      max-age: 1\n    metrics:\n      prefix: ddos\n      tag: shop\n",
    );
    let clients = vec![
        Client::new(Some("a.test"))
            .hello()
            .signal("held")
            .sleep_ms(2500),
        Client::new(Some("a.test")).wait_for("held").hello(),
        Client::new(Some("a.test"))
            .wait_for("held")
            .sleep_ms(200)
            .hello(),
    ];
    let out = run(&ts, &clients);
    assert!(
        out[0].passed() && out[1].refused() && out[2].refused(),
        "{out:?}"
    );
    // One parked and expired; one refused at once (queue full).
    for (m, v) in [
        ("ddos.sni.shop.admitted", 1),
        ("ddos.sni.shop.queued", 1),
        ("ddos.sni.shop.expired", 1),
        ("ddos.sni.shop.rejected", 1),
        ("ddos.sni.shop.resumed", 0),
    ] {
        assert_eq!(ts.wait_metric(m, v), Ok(v), "{m}");
    }
    ts.wait_metrics_after(
        &[("ddos.sni.shop.admitted", 1), ("ddos.sni.shop.expired", 1)],
        &[("ddos.sni.shop.active", 0), ("ddos.sni.shop.waiting", 0)],
    )
    .unwrap();
}

#[test]
fn a_bad_file_at_startup_stops_traffic_server_with_its_line() {
    let err = TrafficServer::builder()
        .tls()
        .plugin_config(format!("{} global.yaml\n", plugin("rate_limit")))
        .config_file(
            "global.yaml",
            "selector:\n  - sni: a.test\n    limit: 1\n    ip-rep: nope\n",
        )
        .start_timeout(Duration::from_secs(15))
        .start()
        .err()
        .expect("traffic_server must not start");
    let text = format!("{err:?}");
    assert!(
        text.contains("global.yaml:4: selector 'a.test': ip-rep 'nope' names no ip-rep entry"),
        "{text}"
    );
}

/// Many clients at once on a small selector, some giving up while parked:
/// every handshake is accounted for exactly once, nothing leaks, and the
/// server goes on.
#[test]
fn a_crowd_of_handshakes_is_accounted_for_and_drains() {
    let ts = start(
        "selector:\n  - sni: a.test\n    limit: 3\n    queue:\n      size: 20\n      max-age: 2\n",
    );
    let clients: Vec<Client> = (0..60)
        .map(|i| {
            let c = Client::new(Some("a.test")).sleep_ms(i % 7 * 30);
            match i % 5 {
                // Gives up while parked (or goes through at once).
                0 => c.hello_within(300).sleep_ms(100),
                _ => c.hello().sleep_ms(150 + (i % 3) * 100),
            }
        })
        .collect();
    let out = run(&ts, &clients);
    let passed = out.iter().filter(|o| o.passed()).count() as u64;
    let failed = out.iter().filter(|o| o.refused() || o.timed_out()).count() as u64;
    assert_eq!(passed + failed, 60, "{out:?}");
    assert_drained(&ts, "a.test");
    let s = selector(&ts, "a.test");
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let refused = &s["refused"];
    // A client that gives up just as its slot comes is resumed after all.
    let went_on = n(&s["admitted"]) + n(&s["resumed"]);
    assert!(
        (passed..=passed + 12).contains(&went_on),
        "{passed} passed: {s}"
    );
    assert_eq!(
        n(&s["admitted"])
            + n(&s["resumed"])
            + n(&refused["full"])
            + n(&refused["expired"])
            + n(&s["abandoned"]),
        60,
        "{s}"
    );
    assert_eq!(
        n(&s["queued"]),
        n(&s["resumed"]) + n(&refused["expired"]) + n(&s["abandoned"]),
        "{s}"
    );
    // Still serving.
    let out = run(&ts, &[Client::new(Some("a.test")).hello()]);
    assert!(out[0].passed(), "{out:?}");
}
