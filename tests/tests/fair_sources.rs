//! rate_limit.so `--fair` flow sources against a real traffic_server: the
//! session, a header, the client address (real distinct loopback sources),
//! a weights file by header and by address, reloaded live (and a bad line
//! refused with file:line), and flows spanning a group's rules.

use std::net::Ipv4Addr;
use std::thread;
use std::time::Duration;

use ats_tests::client::{self, Conn};
use ats_tests::{wait_until, Origin, TrafficServer};

mod fair_flows;
use fair_flows::{flood, req, rule};

/// `n` requests at once from source address `src`, each held `delay_ms`;
/// their statuses.
fn from_ip(port: u16, src: Ipv4Addr, n: usize, delay_ms: u64) -> Vec<u16> {
    let results = client::burst(n, move |i| {
        let mut c = Conn::open_from(port, src)?;
        c.get(
            "ip.test",
            &format!("/{src}/{i}"),
            &[("X-Origin-Delay", &delay_ms.to_string())],
        )
    });
    results
        .into_iter()
        .map(|r| r.map(|r| r.status).unwrap_or(0))
        .collect()
}

#[test]
fn addresses_are_flows_and_weighted_by_address() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("ip-weights.txt", "127.0.0.3 slots=3\n")
        .remap(rule(
            "ip.test",
            &origin,
            "--limit=8 --queue=10 --fair=ip --flow-slots=1 --flow-over=reject --strict \
             --flow-weights=ip-weights.txt",
        ))
        .start()
        .expect("start");
    let port = ts.port();
    let ok = |v: &[u16]| v.iter().filter(|&&s| s == 200).count();
    // 127.0.0.2: one slot, the others refused at once; 127.0.0.3: three.
    let (a, b) = (
        thread::spawn(move || from_ip(port, Ipv4Addr::new(127, 0, 0, 2), 4, 400)),
        thread::spawn(move || from_ip(port, Ipv4Addr::new(127, 0, 0, 3), 4, 400)),
    );
    let (a, b) = (a.join().expect("a"), b.join().expect("b"));
    assert_eq!((ok(&a), ok(&b)), (1, 3), "{a:?} {b:?}");
}

#[test]
fn sessions_are_flows() {
    let (session, user) = (Origin::start(), Origin::start());
    let opts = "--limit=4 --queue=10 --flow-slots=1 --flow-over=reject --strict";
    let ts = TrafficServer::builder()
        .remap(
            rule("sess.test", &session, &format!("{opts} --fair=session"))
                + &rule("user.test", &user, &format!("{opts} --fair=header:X-User")),
        )
        .start()
        .expect("start");
    let port = ts.port();
    // Four connections of one user: four sessions, one slot each…
    let by_session = flood(port, "sess.test", "u", 4, 300)
        .join()
        .expect("client");
    let c = client::status_counts(&by_session);
    assert_eq!(c.get(&200), Some(&4), "{c:?} {by_session:?}");
    // …but one flow by user: one slot, the rest refused.
    let by_user = flood(port, "user.test", "u", 4, 300)
        .join()
        .expect("client");
    assert_eq!(client::status_counts(&by_user).get(&429), Some(&3));
}

#[test]
fn weights_file_gives_slots_reloads_live_and_a_bad_line_is_refused() {
    let origin = Origin::start();
    let line = |slots| {
        rule(
            "w.test",
            &origin,
            &format!(
                "--limit=8 --queue=100 --fair=header:X-User --flow-slots=1 --strict \
                 --flow-weights=fair-weights.txt --retry={slots}"
            ),
        )
    };
    let ts = TrafficServer::builder()
        .with_manager()
        .config_file("fair-weights.txt", "# users\ngold slots=3\n")
        .remap(line(1))
        .start()
        .expect("start");
    let most = |user: &'static str| {
        origin.reset_max_in_flight();
        let all = flood(ts.port(), "w.test", user, 6, 200)
            .join()
            .expect("client");
        assert!(all
            .iter()
            .all(|r| r.as_ref().is_ok_and(|r| r.status == 200)));
        origin.max_in_flight()
    };
    assert_eq!((most("gold"), most("plain")), (3, 1));
    // Edited and reloaded with the configuration (the rule line is unchanged).
    std::fs::write(ts.config_dir().join("fair-weights.txt"), "gold slots=5\n").expect("write");
    ts.reload_remap(&line(1)).expect("reload");
    assert_eq!(most("gold"), 5);
    std::fs::write(
        ts.config_dir().join("fair-weights.txt"),
        "gold slots=5\nsilver slots=lots\n",
    )
    .expect("write");
    let e = ts
        .reload_remap(&line(2))
        .expect_err("a bad line fails the rule");
    assert!(e.contains("fair-weights.txt':2"), "{e}");
    assert_eq!(most("gold"), 5, "the old rule keeps serving");
}

#[test]
fn a_group_shares_flows_across_its_rules() {
    let origin = Origin::start();
    let opts = "--limit=2 --queue=10 --group=g --fair=header:X-User --flow-slots=1 \
                --flow-over=reject --strict";
    let ts = TrafficServer::builder()
        .remap(rule("g1.test", &origin, opts) + &rule("g2.test", &origin, opts))
        .start()
        .expect("start");
    let port = ts.port();
    let holder = thread::spawn(move || req(port, "g1.test", "/a1", "a", 800));
    assert!(wait_until(Duration::from_secs(5), || origin.in_flight() == 1));
    assert_eq!(req(port, "g2.test", "/a2", "a", 0).expect("a2").status, 429);
    assert_eq!(req(port, "g2.test", "/b1", "b", 0).expect("b1").status, 200);
    assert_eq!(holder.join().expect("holder").expect("a1").status, 200);
}
