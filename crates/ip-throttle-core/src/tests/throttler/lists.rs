//! What is throttled: the allow and deny lists and the scope regexes; reloads
//! of the lists and of the options, which keep the state.

use super::*;

#[test]
fn allow_list_passes_and_logs_whitelisted() {
    let (t, _) = throttler(
        &format!("{SMALL} --allow-file=allow.txt --deny-file=deny.txt"),
        &files(),
    );
    for _ in 0..10 {
        let d = t.decide(&get("10.9.1.1"));
        assert_eq!(
            (d.action, kinds(&d)),
            (Action::Pass, vec![EventKind::Whitelisted])
        );
    }
    assert!(
        t.show(ip("10.9.1.1")).is_none(),
        "allow-listed IPs hold no state"
    );
    let d = t.decide(&get("2001:db8:aa:1::9"));
    assert_eq!(d.action, Action::Pass);
}

#[test]
fn deny_list_forbids_or_throttles() {
    let (t, _) = throttler(&format!("{SMALL} --deny-file=deny.txt"), &files());
    let d = t.decide(&get("10.1.1.1"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Blacklisted])
    );
    assert!(
        t.show(ip("10.1.1.1")).is_none(),
        "a denied IP holds no state"
    );
    let (t, _) = throttler(
        &format!("{SMALL} --deny-file=deny.txt --deny-action=throttle --default-action=allow"),
        &files(),
    );
    // Not deny-listed, default allow: never throttled.
    for _ in 0..5 {
        assert_eq!(t.decide(&get("127.0.0.5")).action, Action::Pass);
    }
    // Deny-listed with deny-action=throttle: throttled (whatever the scope).
    let r = Request {
        client: at("192.0.2.66"),
        method: b"POST",
        path: b"/anything",
    };
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Pass, vec![EventKind::Blacklisted])
    );
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Delay(S), vec![EventKind::Blacklisted])
    );
}

#[test]
fn scope_regexes_limit_what_is_throttled_but_a_ban_covers_all() {
    let (t, _) = throttler(
        &format!("{SMALL} --path-regex=^/webapp/ --method-regex=^GET$ --max-concurrent=9"),
        &files(),
    );
    let outside = |m: &'static [u8], p: &'static [u8]| Request {
        client: at("127.0.0.7"),
        method: m,
        path: p,
    };
    for _ in 0..5 {
        assert_eq!(
            t.decide(&outside(b"GET", b"/static/x")).action,
            Action::Pass
        );
        assert_eq!(
            t.decide(&outside(b"POST", b"/webapp/x")).action,
            Action::Pass
        );
    }
    assert!(
        t.show(ip("127.0.0.7")).is_none(),
        "out-of-scope requests create no state"
    );
    let inside = outside(b"GET", b"/webapp/x");
    let steps: Vec<Action> = (0..6).map(|_| t.decide(&inside).action).collect();
    assert_eq!(
        steps,
        [
            Action::Pass,
            Action::Delay(S),
            Action::Delay(2 * S),
            Action::Delay(4 * S),
            Action::Delay(4 * S),
            Action::Forbid
        ]
    );
    let d = t.decide(&outside(b"GET", b"/static/x"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Banned])
    );
}

#[test]
fn reloads_swap_lists_and_options_and_keep_state() {
    let mut f = files();
    let (t, _) = throttler(
        &format!("{SMALL} --deny-file=deny.txt --max-concurrent=9"),
        &f,
    );
    let r = get("127.0.0.11");
    t.decide(&r);
    assert_eq!(t.decide(&r).action, Action::Delay(S));
    assert_eq!(t.decide(&get("10.1.1.1")).action, Action::Forbid);
    f.insert("/etc/ts/deny.txt", "127.0.0.11\n");
    assert_eq!(t.reload_list(ListName::Deny, &f), Ok(1));
    assert_eq!(t.decide(&get("10.1.1.1")).action, Action::Pass);
    assert_eq!(t.decide(&r).action, Action::Forbid);
    assert_eq!(
        t.reload_list(ListName::Allow, &f),
        Err("no --allow-file is configured".into())
    );
    f.insert("/etc/ts/deny.txt", "300.0.0.1\n");
    let e = t.reload_list(ListName::Deny, &f).unwrap_err();
    assert!(
        e.starts_with("--deny-file: /etc/ts/deny.txt:1: '300.0.0.1'"),
        "{e}"
    );
    assert_eq!(
        t.decide(&r).action,
        Action::Forbid,
        "a failed reload keeps the old list"
    );
    // Options: the state survives, the new delays apply.
    let o = Options::parse(
        &["--initial-delay=2", "--max-delay=8", "--max-concurrent=9"],
        Path::new("/etc/ts"),
        &f,
    )
    .unwrap();
    t.reload(o, &f).unwrap();
    assert_eq!(
        t.decide(&r).action,
        Action::Delay(2 * S),
        "state kept: 1 s doubled"
    );
    let o = Options::parse(&["--keys=7"], Path::new("/etc/ts"), &f).unwrap();
    assert!(t
        .reload(o, &f)
        .unwrap_err()
        .starts_with("--keys and --key-prefix cannot change"));
}
