//! Parsing: both value syntaxes, defaults, errors and warnings; any input is
//! parsed without a panic.

use super::*;

#[test]
fn defaults_match_upstream_9_2() {
    let o = parse(&[]).unwrap();
    assert_eq!(o.limit, Some(100));
    assert_eq!(o.queue, u32::MAX);
    assert_eq!(o.error, 429);
    assert_eq!((o.retry, o.maxage_ms, o.header.as_deref()), (0, 0, None));
    assert_eq!(
        (o.prefix.as_str(), o.metric_tag.as_str()),
        ("plugin.rate_limiter", "http.cdn.example.com")
    );
    assert!(!o.conntrack && o.rate.is_none() && !o.ratelimit_headers);
}

#[test]
fn both_value_syntaxes_and_every_option() {
    let o = parse(&[
        "--limit=5",
        "--queue",
        "7",
        "--error=503",
        "--retry=3",
        "--header=@RateLimit-Delay",
        "--maxage",
        "250",
        "--prefix=my.rl",
        "--tag=edge",
        "--conntrack",
        "--rate=12.5",
        "--burst=20",
        "--ratelimit-headers",
    ])
    .unwrap();
    assert_eq!(o.limit, Some(5));
    assert_eq!(o.queue, 7);
    assert_eq!(o.error, 503);
    assert_eq!(o.retry, 3);
    assert_eq!(o.header.as_deref(), Some("@RateLimit-Delay"));
    assert_eq!(o.maxage_ms, 250);
    assert_eq!(
        (o.prefix.as_str(), o.metric_tag.as_str()),
        ("my.rl", "edge")
    );
    assert!(o.conntrack && o.ratelimit_headers);
    assert_eq!((o.rate, o.burst), (Some(12.5), 20));
}

#[test]
fn rate_alone_has_no_concurrency_limit_and_a_one_second_burst() {
    let o = parse(&["--rate=10"]).unwrap();
    assert_eq!((o.limit, o.rate, o.burst), (None, Some(10.0), 10));
    assert_eq!(parse(&["--rate=0.5"]).unwrap().burst, 1);
    assert_eq!(parse(&["--rate=10", "--limit=3"]).unwrap().limit, Some(3));
}

#[test]
fn errors_name_option_value_and_allowed() {
    assert_eq!(
        err(&["--limit=abc"]),
        "--limit has an invalid value 'abc': allowed an integer from 1 to 4294967295 or auto"
    );
    assert_eq!(
        err(&["--queue=-1"]),
        "--queue has an invalid value '-1': allowed an integer from 0 to 4294967295"
    );
    assert_eq!(
        err(&["--error=200"]),
        "--error has an invalid value '200': allowed an integer from 400 to 599"
    );
    assert_eq!(
        err(&["--limit=4294967296"]),
        "--limit has an invalid value '4294967296': allowed an integer from 1 to 4294967295 or auto"
    );
    assert!(err(&["--limit=0"]).starts_with(
        "--limit has an invalid value '0': allowed an integer from 1 to 4294967295; upstream"
    ));
    assert!(err(&["--rate=0"]).starts_with("--rate has an invalid value '0': allowed a number"));
    assert!(err(&["--rate=1e3"]).starts_with("--rate has an invalid value '1e3'"));
    assert!(err(&["--header=Bad Header"]).starts_with("--header has an invalid value 'Bad Header'"));
    assert!(err(&["--tag=a b"]).starts_with("--tag has an invalid value 'a b'"));
    assert!(err(&["--limits=5"])
        .starts_with("unknown option '--limits=5'; known options: --limit, --queue"));
    assert!(err(&["limit=5"]).starts_with("unexpected argument 'limit=5'"));
    assert_eq!(err(&["--limit"]), "--limit needs a value (--limit=VALUE)");
    assert_eq!(
        err(&["--limit=1", "--limit=2"]),
        "--limit given more than once"
    );
    assert_eq!(
        err(&["--conntrack=yes"]),
        "--conntrack takes no value (got 'yes')"
    );
    assert_eq!(
        err(&["--burst=5"]),
        "--burst needs --rate (it sizes the rate bucket)"
    );
    assert_eq!(
        err(&["--limit= 5"]),
        "--limit has an invalid value ' 5': allowed an integer from 1 to 4294967295 or auto"
    );
    assert_eq!(
        Options::parse("/relative", &[]).expect_err("no host").0,
        "--tag is needed: no metric tag can be derived from '/relative'"
    );
}

/// ATS keeps ~1 KB of a diagnostic: a long value must not push the
/// option's name (or what is allowed) out of it.
#[test]
fn long_values_come_after_the_option_and_are_shortened() {
    let digits = "9".repeat(10240);
    assert_eq!(
        err(&[&format!("--limit={digits}")]),
        format!(
            "--limit has an invalid value '{}…' (10240 bytes): allowed an integer from 1 to 4294967295 or auto",
            "9".repeat(limits::quote::MAX_SHOWN_CHARS)
        )
    );
    let spaced = format!(" {}", "x".repeat(10240));
    for (name, takes_value) in &all_options() {
        for value in [digits.as_str(), spaced.as_str()] {
            let arg = format!("--{name}={value}");
            let args: &[&str] = if *name == "burst" {
                &["--rate=1", &arg]
            } else {
                &[&arg]
            };
            let e = match parse(args) {
                // 10 KB of digits is a valid header name, prefix and tag.
                Ok(_) if value == digits && ["header", "prefix", "tag"].contains(name) => continue,
                Ok(o) => panic!("--{name} accepted: {o:?}"),
                Err(e) => e.0,
            };
            assert!(e.starts_with(&format!("--{name} ")), "{e}");
            assert!(e.len() < 300, "{e}");
            if *takes_value {
                let shortened = format!("…' ({} bytes): allowed ", value.len());
                assert!(e.contains(&shortened), "{e}");
            } else {
                assert!(e.contains("takes no value (got '"), "{e}");
            }
        }
    }
    let e = err(&[&format!("--{}", "x".repeat(10240))]);
    assert!(
        // The known options are listed; well within ATS's ~1 KB.
        e.starts_with("unknown option '--xxx") && e.len() < 768,
        "{e}"
    );
    let e = err(&[&digits]);
    assert!(
        e.starts_with("unexpected argument '999") && e.len() < 768,
        "{e}"
    );
}

#[test]
fn control_characters_are_escaped() {
    assert_eq!(
        err(&["--limit=1\u{1}"]),
        "--limit has an invalid value '1\\u{1}': allowed an integer from 1 to 4294967295 or auto"
    );
    assert!(err(&["--tag=a\nb"]).starts_with("--tag has an invalid value 'a\\nb': allowed"));
    assert!(err(&["--x\u{1b}"]).starts_with("unknown option '--x\\u{1b}'"));
}

#[test]
fn warns_about_options_without_effect() {
    let o = parse(&["--queue=0", "--maxage=100", "--header=X-Delay"]).unwrap();
    assert_eq!(o.warnings.len(), 2);
}

#[test]
fn warns_about_count_status_without_limit() {
    let o = parse(&["--rate=1", "--count-status=401", "--key=ip"]).unwrap();
    assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
    assert!(o.warnings[0].starts_with("--count-status without --limit"));
    let o = parse(&[
        "--rate=1",
        "--count-status=401",
        "--key=ip",
        "--limit=1",
        "--queue=0",
    ])
    .unwrap();
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
}

proptest::proptest! {
    /// Any input either parses or yields an error naming an option or argument; never panics.
    #[test]
    fn never_panics(args in proptest::collection::vec("(--)?[a-z-]{0,12}(=[ -~]{0,12})?", 0..6)) {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        match Options::parse(URL, &refs) {
            Ok(o) => {
                proptest::prop_assert!(o.limit.is_some() || o.rate.is_some());
                proptest::prop_assert!(o.error >= 400 && o.error <= 599);
            }
            Err(e) => proptest::prop_assert!(e.0.contains("--") || e.0.contains("argument")),
        }
    }

    /// Whatever the input, an error is short, printable, and starts with
    /// the option it is about.
    #[test]
    fn errors_are_short_printable_and_name_the_option_first(
        i in 0..all_options().len(),
        value in proptest::collection::vec(proptest::char::any(), 0..400),
    ) {
        let name = all_options()[i].0;
        let value: String = value.into_iter().collect();
        let arg = format!("--{name}={value}");
        if let Err(e) = Options::parse(URL, &[&arg]) {
            proptest::prop_assert!(!e.0.chars().any(char::is_control), "{:?}", e.0);
            proptest::prop_assert!(e.0.len() < 600, "{:?}", e.0);
            if name != "burst" {
                proptest::prop_assert!(e.0.starts_with(&format!("--{name} ")), "{:?}", e.0);
            }
        }
    }

    /// Every valid integer round-trips.
    #[test]
    fn integers_round_trip(limit in 1u32.., queue: u32, maxage: u32) {
        let a = [format!("--limit={limit}"), format!("--queue={queue}"), format!("--maxage={maxage}")];
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = Options::parse(URL, &refs).unwrap();
        proptest::prop_assert_eq!((o.limit, o.queue, o.maxage_ms), (Some(limit), queue, u64::from(maxage)));
    }
}

/// A name-taking option given no value must not swallow the next option
/// (`--log --dry-run` once made the rule live and wrote `--dry-run.log`),
/// and no name may start with '-' (issue 30, defect 2).
#[test]
fn a_name_option_never_swallows_the_next_option() {
    assert_eq!(
        err(&["--limit=5", "--log", "--dry-run"]),
        "--log needs a value, and the next argument '--dry-run' is an option: write --log=VALUE"
    );
    for name in ["group", "header", "tag", "prefix"] {
        let e = err(&[&format!("--{name}"), "--conntrack"]);
        assert!(e.starts_with(&format!("--{name} needs a value")), "{e}");
    }
    for (opt, v) in [
        ("log", "-x"),
        ("group", "-g"),
        ("header", "-X-Wait"),
        ("header", "@-X"),
        ("tag", "-t"),
        ("prefix", "--p"),
    ] {
        let e = err(&[&format!("--{opt}={v}")]);
        assert!(
            e.contains("not starting with") && e.contains(&format!("'{v}'")),
            "{e}"
        );
    }
    // Names that only contain '-' further on are fine.
    let o = parse(&[
        "--log=my-log",
        "--group=api-v2",
        "--tag=a-b",
        "--header=X-Wait",
    ])
    .unwrap();
    assert_eq!(
        (o.log.as_deref(), o.group.as_deref()),
        (Some("my-log"), Some("api-v2"))
    );
}
