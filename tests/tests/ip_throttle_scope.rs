//! ip_throttle.so against a real traffic_server: allow and deny lists
//! (IPv4 and IPv6) with both actions and both defaults, path and method
//! scopes from a --config file, --log-only, and refused options.
//!
//! Clients bind distinct loopback sources (each test its own addresses).

mod ip_throttle_common;

use std::net::{Ipv6Addr, TcpListener};

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};
use ip_throttle_common::{delayed_by, get, ip, req, rule, waits_for_log, SMALL};

#[test]
fn allow_and_deny_lists_with_both_actions_and_both_defaults() {
    let origin = Origin::start();
    let common = "--initial-delay=0.5 --threshold=10 --allow-file=allow.txt --deny-file=deny.txt";
    let remap = rule("l.test", &origin, common)
        + &rule(
            "lt.test",
            &origin,
            &format!("{common} --default-action=allow --deny-action=throttle"),
        );
    let ts = TrafficServer::builder()
        .config_file("allow.txt", "# trusted\n127.0.0.6\n127.0.0.32/31 # pair\n")
        .config_file("deny.txt", "127.0.0.0/28\n127.0.0.32/27\n127.0.0.33\n")
        .remap(remap)
        .start()
        .expect("start");
    // l.test: default throttle, deny-action deny.
    for _ in 0..4 {
        let r = get(&ts, ip(6), "l.test"); // allow-listed inside a denied /28
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
        let r = get(&ts, ip(33), "l.test"); // allowed (/31) beats any deny (/27, /32)
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    assert_eq!(get(&ts, ip(7), "l.test").status, 403);
    assert_eq!(get(&ts, ip(40), "l.test").status, 403);
    let a = get(&ts, ip(20), "l.test"); // on neither list: throttled
    let b = get(&ts, ip(20), "l.test");
    delayed_by(&a, 0.0);
    delayed_by(&b, 0.5);
    // lt.test: default allow, deny-action throttle.
    for _ in 0..4 {
        let r = get(&ts, ip(21), "lt.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    let a = get(&ts, ip(8), "lt.test");
    let b = get(&ts, ip(8), "lt.test");
    assert_eq!((a.status, b.status), (200, 200));
    delayed_by(&a, 0.0);
    delayed_by(&b, 0.5);
    waits_for_log(
        &ts,
        &[
            "event=whitelisted ip=127.0.0.6 rule=http.l.test state=allowed",
            "event=blacklisted ip=127.0.0.7 rule=http.l.test state=allowed",
            "event=throttled ip=127.0.0.20 rule=http.l.test state=throttled delay=0.500",
            "event=blacklisted ip=127.0.0.8 rule=http.lt.test state=throttled delay=0.500",
        ],
    );
}

fn has_ipv6_loopback() -> bool {
    TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// An IPv6 client (::1, traffic_server listening on [::1] too) against
/// IPv6 CIDRs: denied by `::/64`; allowed by `::/120` although the deny
/// list holds `::/64` and `::1` itself; on neither list, throttled (its
/// second request is delayed).
#[test]
fn ipv6_allow_and_deny_lists() {
    if !has_ipv6_loopback() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let origin = Origin::start();
    let throttle = "--initial-delay=0.5 --threshold=10";
    let remap = rule(
        "d6.test",
        &origin,
        &format!("{throttle} --deny-file=deny6.txt"),
    ) + &rule(
        "a6.test",
        &origin,
        &format!("{throttle} --allow-file=allow6.txt --deny-file=deny6b.txt"),
    ) + &rule("n6.test", &origin, throttle);
    let ts = TrafficServer::builder()
        .ipv6()
        .config_file("deny6.txt", "2001:db8::/32\n::/64\n")
        .config_file("deny6b.txt", "::/64\n::1\n")
        .config_file("allow6.txt", "::/120 # loopback and neighbours\n")
        .remap(remap)
        .start()
        .expect("start");
    let get6 = |host: &str| {
        let mut c = Conn::open_ipv6(ts.port()).expect("connect [::1]");
        c.get(host, "/", &[]).expect("response")
    };
    assert_eq!(get6("d6.test").status, 403);
    for _ in 0..3 {
        let r = get6("a6.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    delayed_by(&get6("n6.test"), 0.0);
    delayed_by(&get6("n6.test"), 0.5);
    // IPv4 clients are not on the IPv6 lists.
    assert_eq!(get(&ts, ip(14), "d6.test").status, 200);
    waits_for_log(
        &ts,
        &[
            "event=blacklisted ip=::1 rule=http.d6.test",
            "event=whitelisted ip=::1 rule=http.a6.test",
            "event=throttled ip=::1 rule=http.n6.test state=throttled delay=0.500",
        ],
    );
}

#[test]
fn path_and_method_scope_from_a_config_file() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file(
            "ip_throttle.conf",
            "# Perlbal-style scope\ninitial-delay = 0.5\nthreshold = 10\npath-regex = ^/app/\nmethod-regex = ^GET$\nlog-events = throttled\n",
        )
        .remap(rule("s.test", &origin, "--config=ip_throttle.conf"))
        .start()
        .expect("start");
    let me = ip(9);
    for _ in 0..3 {
        let r = req(&ts, me, "GET", "s.test", "/static/x");
        delayed_by(&r, 0.0);
        let r = req(&ts, me, "POST", "s.test", "/app/x");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    delayed_by(&req(&ts, me, "GET", "s.test", "/app/1"), 0.0);
    delayed_by(&req(&ts, me, "GET", "s.test", "/app/2"), 0.5);
    waits_for_log(&ts, &["event=throttled ip=127.0.0.9 rule=http.s.test"]);
    assert_eq!(ts.log("ip_throttle.log").matches("event=").count(), 1);
}

/// "Anchored as written": a path regex without `^` matches anywhere in
/// the path.
#[test]
fn a_path_regex_without_an_anchor_matches_mid_path() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "m.test",
            &origin,
            "--initial-delay=0.5 --threshold=10 --path-regex=app/",
        ))
        .start()
        .expect("start");
    for _ in 0..3 {
        delayed_by(&req(&ts, ip(16), "GET", "m.test", "/static/x"), 0.0);
    }
    delayed_by(&req(&ts, ip(15), "GET", "m.test", "/static/app/x"), 0.0);
    let r = req(&ts, ip(15), "GET", "m.test", "/static/app/y");
    assert_eq!(r.status, 200);
    delayed_by(&r, 0.5);
}

#[test]
fn log_only_delays_and_refuses_nothing_and_logs_everything() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("deny.txt", "127.0.0.10\n")
        .remap(rule(
            "o.test",
            &origin,
            &format!(
                "{SMALL} --ban-threshold=1 --max-concurrent=5 --deny-file=deny.txt --log-only"
            ),
        ))
        .start()
        .expect("start");
    for _ in 0..6 {
        let r = get(&ts, ip(11), "o.test");
        assert_eq!(r.status, 200);
        delayed_by(&r, 0.0);
    }
    let r = get(&ts, ip(10), "o.test");
    assert_eq!(r.status, 200);
    assert_eq!(origin.count(), 7);
    waits_for_log(
        &ts,
        &[
            "event=throttled ip=127.0.0.11 rule=http.o.test state=throttled delay=1.000 violations=0 dry_run=1",
            "event=ban ip=127.0.0.11 rule=http.o.test state=banned delay=4.000 violations=2 dry_run=1",
            "event=banned ip=127.0.0.11",
            "event=blacklisted ip=127.0.0.10 rule=http.o.test state=allowed delay=0.000 violations=0 dry_run=1",
        ],
    );
}

/// Options, config files (name, text), and the message expected.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    &'static str,
);

#[test]
fn bad_options_and_list_lines_fail_the_rule_naming_them() {
    let origin = Origin::start();
    let cases: [Case; 3] = [
        (
            "--initial-delay=soon",
            vec![],
            "[ip_throttle] --initial-delay has an invalid value 'soon': allowed a number of seconds",
        ),
        (
            "--deny-file=deny.txt",
            vec![("deny.txt", "10.0.0.0/8\n10.0.0.0/40\n")],
            "deny.txt:2: '10.0.0.0/40' is not an IP address or CIDR",
        ),
        (
            "--config=t.conf",
            vec![("t.conf", "max-concurrent=many\n")],
            "[ip_throttle] --max-concurrent has an invalid value 'many' (at ",
        ),
    ];
    for (params, files, want) in cases {
        let mut b = TrafficServer::builder().remap(rule("bad.test", &origin, params));
        for (n, t) in &files {
            b = b.config_file(n, t);
        }
        let err = b
            .start()
            .err()
            .unwrap_or_else(|| panic!("{params} must fail the rule"));
        let line = err
            .diags
            .lines()
            .find(|l| l.contains("failed to create instance for plugin"))
            .unwrap_or_else(|| panic!("no refusal in diags.log: {err:?}"));
        assert!(line.contains(want), "{params}: {line}");
    }
}
