//! `traffic_ctl plugin msg ip_throttle "…"` against a real traffic_server
//! under traffic_manager: `show IP` reporting a ban, `unban IP` lifting it,
//! `reload allow|deny|config` swapping files in (a bad line answers
//! file:line and keeps the old list), bad commands answered without a
//! change, a 1 M-line list reloaded while traffic flows, and `show` seeing
//! IPv6 clients aggregated by /64.
//!
//! Clients bind their own loopback sources (127.0.0.40 and up here).

use std::fs;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::{self, Conn, Response};
use ats_tests::{Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("ip_throttle", host, origin, params)
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn get(ts: &TrafficServer, src: Ipv4Addr, host: &str) -> Response {
    let mut c = Conn::open_from(ts.port(), src).expect("connect");
    c.get(host, "/", &[]).expect("response")
}

fn ctl(ts: &TrafficServer, command: &str) -> String {
    ts.plugin_msg("ip_throttle", command)
}

fn ok(answer: &str) -> bool {
    answer.contains("\"ok\":true")
}

/// Delays of 2 s; the fourth request of an IP is the ban (violation 2 > 1).
const BANS: &str =
    "--initial-delay=2 --max-delay=2 --threshold=5 --ban-threshold=1 --ban-expiration=600";

/// How much sooner than its value a delay may end, as the client measures
/// it (ATS's cached clock and whole ms: see foundation.rs).
const TIMER_EARLY: Duration = Duration::from_millis(100);

/// Bans `src` on a rule with [`BANS`]: one request passes (probation), then
/// three go at once: two are delayed (violations 0 and 1), the third is the
/// ban. Sent together, each reaches the plugin well within the 4 s (twice
/// the delay) that keep the IP throttled, however slow the machine; sent
/// one after another with 0.1 s delays, each had what was left of 0.1 s
/// after the previous response. Statuses: the first, then the rest sorted.
fn ban(ts: &TrafficServer, src: Ipv4Addr, host: &str) -> Vec<u16> {
    let mut out = vec![get(ts, src, host).status];
    let mut rest: Vec<u16> = client::burst(3, |_| Ok(get(ts, src, host)))
        .into_iter()
        .map(|r| r.expect("request").status)
        .collect();
    rest.sort_unstable();
    out.extend(rest);
    out
}

#[test]
fn show_reports_a_ban_and_unban_lifts_it() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "u.test",
            &origin,
            &format!("{BANS} --instance=unban1"),
        ))
        .with_manager()
        .start()
        .expect("start");
    let me = ip(40);
    // Pass (probation), delayed (violations 0, then 1), then 2 > 1: banned.
    assert_eq!(ban(&ts, me, "u.test"), [200, 200, 200, 403]);
    assert_eq!(get(&ts, me, "u.test").status, 403);
    let shown = ctl(&ts, "show 127.0.0.40");
    for field in [
        "\"rule\":\"http.u.test\"",
        "\"from\":\"http://u.test/\"",
        "\"instance\":\"unban1\"",
        "\"state\":\"banned\"",
        "\"tracked\":true",
        "\"violations\":2",
        "\"listed\":\"neither\"",
    ] {
        assert!(ok(&shown) && shown.contains(field), "{field} in {shown}");
    }
    // By rule name: its tag, from-URL or instance.
    for name in ["http.u.test", "http://u.test/", "unban1"] {
        let by = ts.plugin_msg("ip_throttle.show", &format!("127.0.0.40 {name}"));
        assert!(by.contains("\"state\":\"banned\""), "{name}: {by}");
    }
    let never = ctl(&ts, "show 127.0.0.41");
    assert!(
        never.contains("\"tracked\":false") && never.contains("\"state\":\"allowed\""),
        "{never}"
    );

    let unban = ctl(&ts, "unban 127.0.0.40");
    assert!(
        ok(&unban) && unban.contains("\"unbanned\":[\"http.u.test\"]"),
        "{unban}"
    );
    let r = get(&ts, me, "u.test");
    assert_eq!(r.status, 200, "the ban is lifted");
    // And not delayed: the IP started afresh, so that request put it in
    // probation; still throttled, it would have waited 2 s (at least 2 s
    // less TIMER_EARLY as measured here).
    let shown = ctl(&ts, "show 127.0.0.40");
    assert!(
        shown.contains("\"state\":\"probation\"") && shown.contains("\"violations\":0"),
        "{shown}"
    );
    assert!(
        r.elapsed < Duration::from_secs(2) - TIMER_EARLY,
        "delayed: {:?}",
        r.elapsed
    );
    let again = ctl(&ts, "unban 127.0.0.40");
    assert!(ok(&again) && again.contains("\"unbanned\":[]"), "{again}");
    assert!(
        ts.wait_for_log("ip_throttle.log", Duration::from_secs(10), |t| {
            t.contains("event=unban ip=127.0.0.40 rule=http.u.test state=allowed")
        })
    );
    assert!(ts
        .diags()
        .contains("127.0.0.40: unbanned by command in http.u.test"));
}

/// `reload allow`: the allow list changed on disk takes effect (it beats
/// the deny list that holds both clients).
#[test]
fn reload_allow_swaps_the_allow_list_in() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("allow.list", "127.0.0.48\n")
        .config_file("deny.list", "127.0.0.48/31\n")
        .remap(rule(
            "ra.test",
            &origin,
            "--allow-file=allow.list --deny-file=deny.list",
        ))
        .with_manager()
        .start()
        .expect("start");
    assert_eq!(get(&ts, ip(48), "ra.test").status, 200);
    assert_eq!(get(&ts, ip(49), "ra.test").status, 403);
    fs::write(
        ts.config_dir().join("allow.list"),
        "# swapped\n127.0.0.49/32\n",
    )
    .expect("write");
    let r = ctl(&ts, "reload allow");
    assert!(
        ok(&r) && r.contains("\"prefixes\":1") && r.contains("\"rule\":\"http.ra.test\""),
        "{r}"
    );
    assert_eq!(get(&ts, ip(49), "ra.test").status, 200);
    assert_eq!(get(&ts, ip(48), "ra.test").status, 403);
}

/// IPv6 clients share their /64's state (the default `--key-prefix`):
/// after a request from ::1, `show` reports another address of `::/64` in
/// probation too, and one of the next /64 untracked.
#[test]
fn ipv6_clients_are_aggregated_by_64() {
    if std::net::TcpListener::bind((std::net::Ipv6Addr::LOCALHOST, 0)).is_err() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .ipv6()
        .remap(rule(
            "v6.test",
            &origin,
            "--initial-delay=1 --threshold=600",
        ))
        .with_manager()
        .start()
        .expect("start");
    let mut c = Conn::open_ipv6(ts.port()).expect("connect [::1]");
    assert_eq!(c.get("v6.test", "/", &[]).expect("response").status, 200);
    for same in ["::1", "::2", "::1:0:0:2", "0:0:0:0:ffff:ffff:ffff:ffff"] {
        let shown = ctl(&ts, &format!("show {same}"));
        assert!(
            shown.contains("\"tracked\":true") && shown.contains("\"state\":\"probation\""),
            "{same}: {shown}"
        );
    }
    let other = ctl(&ts, "show 0:0:0:1::1");
    assert!(other.contains("\"tracked\":false"), "{other}");
}

#[test]
fn reload_swaps_lists_and_config_and_a_bad_line_keeps_the_old_list() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("deny.list", "127.0.0.42\n")
        .config_file("reload.conf", "deny-file = deny.list\n")
        .remap(rule("l.test", &origin, "--config=reload.conf"))
        .with_manager()
        .start()
        .expect("start");
    let deny = ts.config_dir().join("deny.list");
    assert_eq!(get(&ts, ip(42), "l.test").status, 403);
    assert_eq!(get(&ts, ip(43), "l.test").status, 200);

    fs::write(&deny, "# swapped\n127.0.0.43\n127.0.0.44/32\n").expect("write");
    let r = ctl(&ts, "reload deny");
    assert!(
        ok(&r) && r.contains("\"prefixes\":2") && r.contains("\"rule\":\"http.l.test\""),
        "{r}"
    );
    assert_eq!(get(&ts, ip(42), "l.test").status, 200);
    assert_eq!(get(&ts, ip(43), "l.test").status, 403);

    fs::write(&deny, "127.0.0.42\n127.0.0.45\nbogus\n").expect("write");
    let r = ctl(&ts, "reload deny http.l.test");
    assert!(!ok(&r), "{r}");
    assert!(
        r.contains("deny.list:3: 'bogus' is not an IP address or CIDR")
            && r.contains("the old configuration stays"),
        "{r}"
    );
    assert_eq!(get(&ts, ip(43), "l.test").status, 403, "old list kept");
    assert_eq!(get(&ts, ip(42), "l.test").status, 200, "old list kept");

    let r = ctl(&ts, "reload allow");
    assert!(r.contains("reload allow: no rule has --allow-file"), "{r}");

    // reload config: the --config file again (and both lists).
    fs::write(&deny, "127.0.0.42\n").expect("write");
    let conf = ts.config_dir().join("reload.conf");
    fs::write(&conf, "deny-file = deny.list\nlog-only\n").expect("write");
    let r = ctl(&ts, "reload config");
    assert!(ok(&r) && r.contains("\"deny\":1"), "{r}");
    let shown = ctl(&ts, "show 127.0.0.42");
    assert!(
        shown.contains("\"log_only\":true") && shown.contains("\"listed\":\"deny\""),
        "{shown}"
    );
    assert_eq!(
        get(&ts, ip(42), "l.test").status,
        200,
        "--log-only refuses nothing"
    );
    fs::write(&conf, "deny-file = deny.list\nmax-delay = soon\n").expect("write");
    let r = ctl(&ts, "reload config");
    assert!(!ok(&r) && r.contains("max-delay"), "{r}");
    assert!(
        ctl(&ts, "show 127.0.0.42").contains("\"log_only\":true"),
        "kept"
    );
    assert!(ts.diags().contains("http.l.test: reloaded deny in "));
}

#[test]
fn bad_commands_are_answered_and_change_nothing() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule("b.test", &origin, BANS))
        .with_manager()
        .start()
        .expect("start");
    assert_eq!(ban(&ts, ip(46), "b.test"), [200, 200, 200, 403]);
    for (command, error) in [
        (
            "ban 127.0.0.46",
            "unknown command 'ban': allowed reload allow|deny|config [RULE]",
        ),
        (
            "unban 127.0.0.0/8",
            "unban: '127.0.0.0/8' is not an IP address",
        ),
        (
            "unban 127.0.0.46 nobody",
            "no rule named 'nobody' (a tag, from-URL or --instance); live: http.b.test",
        ),
        (
            "reload lists",
            "reload: 'lists' is not allow, deny or config",
        ),
        (
            "reload deny http.b.test",
            "http.b.test: no --deny-file is configured",
        ),
        ("show", "show: wrong arguments"),
        ("show 127.0.0.46 http.b.test extra", "show: wrong arguments"),
    ] {
        let answer = ctl(&ts, command);
        assert!(answer.contains("\"ok\":false"), "{command}: {answer}");
        assert!(answer.contains(error), "{command}: {answer}");
    }
    assert!(
        ctl(&ts, "show 127.0.0.46").contains("\"state\":\"banned\""),
        "still banned"
    );
    assert_eq!(get(&ts, ip(46), "b.test").status, 403);
    assert!(ts.diags().contains("ctl: unknown command 'ban'"));
}

/// A 1 M-line deny list reloaded while a client keeps sending requests:
/// the requests are never held up by the reload (it runs on a task thread
/// and swaps in whole). Prints the reload time from the answer.
#[test]
fn a_million_line_reload_does_not_stall_traffic() {
    const LINES: u32 = 1_000_000;
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .config_file("big.list", "10.0.0.1\n")
        .remap(rule(
            "m.test",
            &origin,
            "--deny-file=big.list --default-action=allow",
        ))
        .with_manager()
        .start()
        .expect("start");
    let mut text = String::with_capacity(LINES as usize * 14);
    for i in 0..LINES {
        let a = 0x0a00_0000 + i;
        text.push_str(&format!("{}\n", Ipv4Addr::from(a)));
    }
    fs::write(ts.config_dir().join("big.list"), text).expect("write");

    let stop = Arc::new(AtomicBool::new(false));
    let port = ts.port();
    let traffic = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut c = Conn::open_from(port, ip(47)).expect("connect");
            let (mut n, mut slowest) = (0u32, Duration::ZERO);
            let end = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Acquire) && Instant::now() < end {
                let r = c.get("m.test", "/", &[]).expect("response");
                assert_eq!(r.status, 200);
                slowest = slowest.max(r.elapsed);
                n += 1;
            }
            (n, slowest)
        })
    };
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let r = ctl(&ts, "reload deny");
    let took = started.elapsed();
    stop.store(true, Ordering::Release);
    let (n, slowest) = traffic.join().expect("traffic");
    assert!(
        ok(&r) && r.contains(&format!("\"prefixes\":{LINES}")),
        "{r}"
    );
    let ms = r
        .split("\"ms\":")
        .nth(1)
        .and_then(|s| s.split([',', '}']).next())
        .unwrap_or("?");
    eprintln!(
        "1 M-line reload: {ms} ms in the plugin, answer after {took:?}; {n} requests meanwhile, \
         slowest {slowest:?}"
    );
    assert!(n >= 10, "traffic flowed during the reload ({n} requests)");
    assert!(
        slowest < Duration::from_millis(500),
        "no request was held up by the reload (slowest {slowest:?})"
    );
    assert_eq!(get(&ts, Ipv4Addr::new(127, 0, 0, 48), "m.test").status, 200);
    let shown = ctl(&ts, "show 10.15.66.63");
    assert!(shown.contains("\"listed\":\"deny\""), "{shown}");
}
