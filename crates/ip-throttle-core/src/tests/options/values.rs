//! Options and their values: the defaults (Perlbal's), every option,
//! seconds, `--log-events`, the errors' wording, a value option before
//! another option.

use super::*;

#[test]
fn perlbal_defaults() {
    let o = parse(&[]).unwrap();
    let p = o.params;
    assert_eq!(
        (p.initial_delay, p.max_delay, p.threshold),
        (3 * S, 300 * S, 60 * S)
    );
    assert_eq!(
        (p.max_concurrent, p.ban_threshold, p.ban_expiration),
        (2, 0, 60 * S)
    );
    assert_eq!(o.default_action, DefaultAction::Throttle);
    assert_eq!(o.deny_action, DenyAction::Deny);
    assert_eq!(o.log_events, LogEvents::ALL);
    assert!(!o.log_only);
    assert_eq!(o.instance, "Throttle");
    assert_eq!((o.keys, o.v4_prefix, o.v6_prefix), (100_000, 32, 64));
    assert!(o.path_regex.is_none() && o.method_regex.is_none());
}

#[test]
fn every_option_parses() {
    let o = parse(&[
        "--initial-delay=0.5",
        "--max-delay",
        "4",
        "--threshold=1.25",
        "--max-concurrent=7",
        "--ban-threshold=3",
        "--ban-expiration=180",
        "--path-regex=^/webapp/",
        "--method-regex=^GET$",
        "--allow-file=allow.txt",
        "--deny-file=/abs/deny.txt",
        "--default-action=allow",
        "--deny-action=throttle",
        "--log-events=ban,unban,throttled,banned",
        "--log-only",
        "--instance=mywebapp",
        "--keys=500",
        "--key-prefix=24/48",
    ])
    .unwrap();
    let p = o.params;
    assert_eq!(
        (p.initial_delay, p.max_delay, p.threshold),
        (500 * MS, 4 * S, 1250 * MS)
    );
    assert_eq!(
        (p.max_concurrent, p.ban_threshold, p.ban_expiration),
        (7, 3, 180 * S)
    );
    assert!(o.path_regex.as_ref().unwrap().is_match(b"/webapp/x"));
    assert!(!o.path_regex.as_ref().unwrap().is_match(b"/other/webapp/"));
    assert!(o.method_regex.as_ref().unwrap().is_match(b"GET"));
    assert!(!o.method_regex.as_ref().unwrap().is_match(b"GETX"));
    assert_eq!(
        o.allow_file.as_deref(),
        Some(Path::new("/etc/ts/allow.txt"))
    );
    assert_eq!(o.deny_file.as_deref(), Some(Path::new("/abs/deny.txt")));
    assert_eq!(o.default_action, DefaultAction::Allow);
    assert_eq!(o.deny_action, DenyAction::Throttle);
    assert!(o.log_events.has(EventKind::Ban) && o.log_events.has(EventKind::Banned));
    assert!(!o.log_events.has(EventKind::Whitelisted));
    assert!(o.log_only);
    assert_eq!(o.instance, "mywebapp");
    assert_eq!((o.keys, o.v4_prefix, o.v6_prefix), (500, 24, 48));
}

#[test]
fn seconds_are_exact_and_strict() {
    assert_eq!(parse_seconds("3"), Some(3 * S));
    assert_eq!(parse_seconds("0.5"), Some(500 * MS));
    assert_eq!(parse_seconds(".25"), Some(250 * MS));
    assert_eq!(parse_seconds("1.000000001"), Some(S + 1));
    for bad in [
        "",
        ".",
        "1.",
        "-1",
        "1e3",
        "1.0000000001",
        " 1",
        "1s",
        "0x10",
        "+1",
    ] {
        assert_eq!(parse_seconds(bad), None, "{bad:?}");
    }
    assert_eq!(parse_seconds("99999999999999999999"), None);
}

#[test]
fn errors_name_the_option_the_value_and_what_is_allowed() {
    let e = parse(&["--initial-delay=abc"]).unwrap_err();
    assert_eq!(
        e,
        "--initial-delay has an invalid value 'abc': allowed a number of seconds from more than 0 \
         to 86400, fractions allowed (e.g. 3 or 0.5)"
    );
    let e = parse(&["--initial-delay=0"]).unwrap_err();
    assert!(
        e.starts_with("--initial-delay has an invalid value '0'"),
        "{e}"
    );
    let e = parse(&["--max-concurrent=-1"]).unwrap_err();
    assert_eq!(
        e,
        "--max-concurrent has an invalid value '-1': allowed an integer from 0 to 4294967295"
    );
    let e = parse(&["--default-action=deny"]).unwrap_err();
    assert_eq!(
        e,
        "--default-action has an invalid value 'deny': allowed allow or throttle"
    );
    let e = parse(&["--deny-action=allow"]).unwrap_err();
    assert_eq!(
        e,
        "--deny-action has an invalid value 'allow': allowed deny or throttle"
    );
    let e = parse(&["--log-events=ban,everything"]).unwrap_err();
    assert!(e.starts_with("--log-events has an invalid value 'ban,everything': allowed a comma-separated list of ban, unban"), "{e}");
    let e = parse(&["--path-regex=(unclosed"]).unwrap_err();
    assert!(
        e.starts_with(
            "--path-regex has an invalid value '(unclosed': allowed a regular expression"
        ),
        "{e}"
    );
    let e = parse(&["--max-delay=1", "--initial-delay=2"]).unwrap_err();
    assert_eq!(
        e,
        "--max-delay has an invalid value '1.000': allowed at least --initial-delay (2.000 s)"
    );
    let e = parse(&["--log-only=maybe"]).unwrap_err();
    assert!(
        e.starts_with("--log-only has an invalid value 'maybe'"),
        "{e}"
    );
    let e = parse(&["--initial_delay=1"]).unwrap_err();
    assert!(
        e.starts_with("unknown option '--initial_delay=1'; known options: --initial-delay,"),
        "{e}"
    );
    let e = parse(&["initial-delay=1"]).unwrap_err();
    assert!(
        e.starts_with("unexpected argument 'initial-delay=1'"),
        "{e}"
    );
    let e = parse(&["--threshold"]).unwrap_err();
    assert_eq!(e, "--threshold needs a value (--threshold=VALUE)");
    let e = parse(&["--key-prefix=33/64"]).unwrap_err();
    assert!(
        e.starts_with("--key-prefix has an invalid value '33/64'"),
        "{e}"
    );
    let e = parse(&["--keys=0"]).unwrap_err();
    assert!(
        e.starts_with("--keys has an invalid value '0': allowed an integer from 1 to"),
        "{e}"
    );
    let long = "9".repeat(10_000);
    let e = parse(&[&format!("--ban-threshold={long}")]).unwrap_err();
    assert!(e.len() < 200 && e.contains("(10000 bytes)"), "{e}");
}

#[test]
fn log_events_in_perlbal_order() {
    assert_eq!(LogEvents::parse("all,none"), Some(LogEvents::NONE));
    assert_eq!(LogEvents::parse("none,ban").unwrap().describe(), "ban");
    assert_eq!(
        LogEvents::parse("BAN, unban").unwrap().describe(),
        "ban,unban"
    );
    assert_eq!(LogEvents::parse(""), None);
    assert_eq!(LogEvents::parse("ban,bogus"), None);
}

/// A value option never swallows the next option, and the instance name
/// never starts with '-' (issue 30: `--instance --log-only` made the rule
/// enforce).
#[test]
fn a_name_option_never_swallows_the_next_option() {
    assert_eq!(
        parse(&["--instance", "--log-only"]).unwrap_err(),
        "--instance needs a value, and the next argument '--log-only' is an option: write \
         --instance=VALUE"
    );
    let e = parse(&["--instance=-web"]).unwrap_err();
    assert!(e.contains("not starting with '-'"), "{e}");
    assert_eq!(parse(&["--instance=web-eu"]).unwrap().instance, "web-eu");
}
