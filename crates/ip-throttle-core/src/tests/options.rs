use std::path::Path;

use store_url::StoreUrl;

use super::{MemFiles, MS, S};
use crate::options::{parse_seconds, DefaultAction, DenyAction, EventKind, LogEvents, Options};

fn parse(args: &[&str]) -> Result<Options, String> {
    Options::parse(args, Path::new("/etc/ts"), &MemFiles::default())
}

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
fn config_file_holds_the_same_options_and_pparams_after_it_override() {
    let files = MemFiles::of(&[(
        "/etc/ts/throttle.conf",
        "# Perlbal's example\ninitial-delay = 10\n--max-delay=60\n\nthreshold=3 # seconds\nmax-concurrent=2\n\
         ban-threshold=4\nban-expiration=180\npath-regex=^/webapp/\nmethod-regex=^GET$\nlog-events=ban,unban\nlog-only\n",
    )]);
    let o = Options::parse(
        &["--config=throttle.conf", "--max-delay=90"],
        Path::new("/etc/ts"),
        &files,
    )
    .unwrap();
    let p = o.params;
    assert_eq!(
        (p.initial_delay, p.max_delay, p.threshold),
        (10 * S, 90 * S, 3 * S)
    );
    assert_eq!((p.ban_threshold, p.ban_expiration), (4, 180 * S));
    assert!(o.log_only);
    assert_eq!(o.log_events.describe(), "ban,unban");
}

#[test]
fn a_hash_inside_a_value_is_not_a_comment() {
    let files = MemFiles::of(&[(
        "/etc/ts/t.conf",
        "# scope
path-regex = ^/a#b(#x)?$ # the anchor page
threshold=3 # seconds
	max-delay=9	# tab
",
    )]);
    let o = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap();
    let re = o.path_regex.as_ref().unwrap();
    assert_eq!(re.as_str(), "^/a#b(#x)?$");
    assert!(re.is_match(b"/a#b") && re.is_match(b"/a#b#x") && !re.is_match(b"/a"));
    assert_eq!((o.params.threshold, o.params.max_delay), (3 * S, 9 * S));
    assert_eq!(crate::options::strip_comment("#all"), "");
    assert_eq!(crate::options::strip_comment("a=1#2"), "a=1#2");
}

#[test]
fn config_file_errors_name_file_and_line() {
    let files = MemFiles::of(&[("/etc/ts/t.conf", "initial-delay=1\n\nmax-delay=soon\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e,
        "--max-delay has an invalid value 'soon' (at /etc/ts/t.conf:3): allowed a number of \
         seconds from more than 0 to 86400, fractions allowed (e.g. 3 or 0.5)"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "bogus=1\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with("unknown option 'bogus=1' (at /etc/ts/t.conf:1)"),
        "{e}"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "config=x\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e,
        "--config cannot be used inside a config file (at /etc/ts/t.conf:1)"
    );
    let e = Options::parse(&["--config=missing.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with("--config cannot read /etc/ts/missing.conf: No such file"),
        "{e}"
    );
}

/// The bounded reader's refusals keep ip_throttle's wording, for a
/// `--config` and a list file alike.
#[test]
fn unreadable_files_are_named_with_why() {
    let files = MemFiles::new()
        .with(
            "/etc/ts/big.conf",
            &"#".repeat(crate::options::MAX_CONFIG_BYTES as usize + 1),
        )
        .with_bytes("/etc/ts/latin1.conf", b"keys=1\n\xe9")
        .with_dir("/etc/ts/d");
    let e = |arg: &str| Options::parse(&[arg], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e("--config=big.conf"),
        "--config cannot read /etc/ts/big.conf: larger than 1048576 bytes"
    );
    assert_eq!(
        e("--config=latin1.conf"),
        "--config cannot read /etc/ts/latin1.conf: not UTF-8 text (byte 7)"
    );
    assert_eq!(
        e("--config=d"),
        "--config cannot read /etc/ts/d: Is a directory (os error 21)"
    );
    let list = |p: &str| crate::lists::load(Path::new(p), &files).unwrap_err();
    assert_eq!(
        list("/etc/ts/latin1.conf"),
        "cannot read /etc/ts/latin1.conf: not UTF-8 text (byte 7)"
    );
    assert_eq!(
        list("/etc/ts/d"),
        "cannot read /etc/ts/d: Is a directory (os error 21)"
    );
    assert_eq!(
        list("/etc/ts/nope"),
        "cannot read /etc/ts/nope: No such file or directory (os error 2)"
    );
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

#[test]
fn store_options() {
    let o = parse(&[
        "--store=memcached://10.0.0.1:11211,cache.example:11212,[::1]:11213",
        "--store-timeout=20",
        "--instance=web:eu",
    ])
    .unwrap();
    assert_eq!(
        o.store,
        Some(StoreUrl::Memcached(vec![
            "10.0.0.1:11211".to_owned(),
            "cache.example:11212".to_owned(),
            "[::1]:11213".to_owned()
        ]))
    );
    assert_eq!(o.store_timeout_ms, 20);
    assert!(o.describe().ends_with(
        " store=memcached://10.0.0.1:11211,cache.example:11212,[::1]:11213 store-timeout=20ms"
    ));
    let d = parse(&[]).unwrap();
    assert_eq!((d.store, d.store_timeout_ms), (None, 50));
    let r = parse(&["--store=redis://127.0.0.1:7000/2"]).unwrap();
    assert!(r
        .describe()
        .ends_with(" store=redis://127.0.0.1:7000/2 store-timeout=50ms"));
    let c = parse(&["--store=redis+cluster://127.0.0.1:7000,127.0.0.1:7001"]).unwrap();
    assert!(c
        .describe()
        .ends_with(" store=redis+cluster://127.0.0.1:7000,127.0.0.1:7001 store-timeout=50ms"));
    let e = parse(&["--store=redis+cluster://h:1/0"]).unwrap_err();
    assert!(
        e.starts_with("--store has an invalid value 'redis+cluster://h:1/0'")
            && e.contains("no /DB (a Redis Cluster has only database 0)"),
        "{e}"
    );
    let e = parse(&["--store=rediss://h:1"]).unwrap_err();
    assert!(
        e.starts_with("--store has an unsupported value 'rediss://h:1': "),
        "{e}"
    );
    for bad in [
        "http://h:6379",
        "memcached://",
        "memcached://h",
        "memcached://h:0",
        "memcached://h:1,",
        "memcached://[zz]:1",
        "memcached://h h:1",
    ] {
        let e = parse(&[&format!("--store={bad}")]).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "--store has an invalid value '{bad}': allowed memcached://"
            )),
            "{e}"
        );
    }
    let e = parse(&["--store-timeout=0"]).unwrap_err();
    assert!(
        e.starts_with("--store-timeout has an invalid value '0'"),
        "{e}"
    );
    let e = parse(&[
        "--store=memcached://h:1",
        &format!("--instance={}", "x".repeat(201)),
    ])
    .unwrap_err();
    assert!(e.starts_with("--instance has an invalid value 'xxx"), "{e}");
    assert!(e.contains("for a --store"), "{e}");
}

#[test]
fn trusted_proxies_and_their_header() {
    let o = parse(&[]).unwrap();
    assert!(o.trusted_proxies.is_empty());
    assert_eq!(o.header(), forwarded::ForwardedHeader::XForwardedFor);
    let o = parse(&[
        "--trusted-proxies=10.1.2.3/8, 127.0.0.1,2001:db8::/32",
        "--forwarded-header=forwarded",
    ])
    .unwrap();
    let nets: Vec<String> = o.trusted_proxies.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.0.0.0/8", "127.0.0.1/32", "2001:db8::/32"]);
    assert_eq!(o.header(), forwarded::ForwardedHeader::Forwarded);
    assert!(
        o.describe().contains(
            " trusted-proxies=10.0.0.0/8,127.0.0.1/32,2001:db8::/32 forwarded-header=Forwarded"
        ),
        "{}",
        o.describe()
    );
    // The same from a config file.
    let files = MemFiles::of(&[(
        "/etc/ts/t.conf",
        "trusted-proxies = 10.0.0.0/8 # the balancers\nforwarded-header = X-Forwarded-For\n",
    )]);
    let o = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap();
    assert_eq!(o.trusted_proxies.len(), 1);
    assert_eq!(o.header(), forwarded::ForwardedHeader::XForwardedFor);
}

#[test]
fn trusted_proxy_errors_name_the_option_the_value_and_what_is_allowed() {
    let e = parse(&["--trusted-proxies=10.0.0.0/8,lb.example"]).unwrap_err();
    assert_eq!(
        e,
        "--trusted-proxies has an invalid value '10.0.0.0/8,lb.example': allowed IP addresses or \
         CIDRs, comma-separated, at most 64 (e.g. 10.0.0.0/8,2001:db8::/32; 'lb.example' is not \
         an IP address or CIDR)"
    );
    let e = parse(&["--trusted-proxies="]).unwrap_err();
    assert!(
        e.starts_with("--trusted-proxies has an invalid value '': allowed IP addresses"),
        "{e}"
    );
    let many: Vec<String> = (0..65).map(|i| format!("10.0.0.{i}")).collect();
    let e = parse(&[&format!("--trusted-proxies={}", many.join(","))]).unwrap_err();
    assert!(
        e.starts_with("--trusted-proxies has an invalid value '10.0.0.0,")
            && e.ends_with("allowed at most 64 IP addresses or CIDRs"),
        "{e}"
    );
    let e = parse(&[
        "--trusted-proxies=10.0.0.0/8",
        "--forwarded-header=X-Real-IP",
    ])
    .unwrap_err();
    assert_eq!(
        e,
        "--forwarded-header has an invalid value 'X-Real-IP': allowed X-Forwarded-For or Forwarded"
    );
    let e = parse(&["--forwarded-header=Forwarded"]).unwrap_err();
    assert_eq!(
        e,
        "--forwarded-header needs --trusted-proxies: the header is read only from them"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "\ntrusted-proxies = 10.0.0.0/33\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with(
            "--trusted-proxies has an invalid value '10.0.0.0/33' (at /etc/ts/t.conf:2): allowed"
        ),
        "{e}"
    );
}

/// The options' table is the single source of their names: the unknown-option
/// messages (of a `@pparam` and of a config line) list exactly its names,
/// each name is known to both, and no name is there twice.
#[test]
fn the_table_is_the_single_source_of_names() {
    let tables = crate::options::tables();
    assert_eq!(optspec::duplicates(&tables), Vec::<&str>::new());
    let names: Vec<String> = optspec::names(&tables).map(|n| format!("--{n}")).collect();
    let e = parse(&["--bogus"]).unwrap_err();
    let listed = e
        .strip_prefix("unknown option '--bogus'; known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    let files = MemFiles::of(&[("/etc/ts/t.conf", "bogus = 1\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    let listed = e
        .strip_prefix("unknown option 'bogus = 1' (at /etc/ts/t.conf:1); known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    for name in optspec::names(&tables) {
        let e = parse(&[&format!("--{name}=")]).err().unwrap_or_default();
        assert!(!e.starts_with("unknown option"), "--{name}: {e}");
        let files = MemFiles::of(&[("/etc/ts/t.conf", &format!("{name} =\n"))]);
        let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files)
            .err()
            .unwrap_or_default();
        assert!(!e.starts_with("unknown option"), "{name} in a file: {e}");
    }
}

/// The option table of docs/ip_throttle.md lists exactly the table's names,
/// and every option has a docs line.
#[test]
fn the_docs_list_exactly_the_tables_names() {
    let md = include_str!("../../../../docs/ip_throttle.md");
    // A cell is `--name` or `--name=VALUE`.
    let mut documented: Vec<&str> = optspec::documented(md, "Options", "--")
        .expect("an Options section")
        .into_iter()
        .filter_map(|cell| cell.split('=').next())
        .collect();
    let tables = crate::options::tables();
    let mut known: Vec<&str> = optspec::names(&tables).collect();
    documented.sort_unstable();
    known.sort_unstable();
    assert_eq!(documented, known);
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
