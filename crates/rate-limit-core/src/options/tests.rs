use super::*;
use limits::quote::quote;

const URL: &str = "http://cdn.example.com/";

fn parse(args: &[&str]) -> Result<Options, OptionError> {
    Options::parse(URL, args)
}

fn err(args: &[&str]) -> String {
    parse(args).expect_err("must be rejected").0
}

/// Every option's name and whether it takes a value, from the tables.
fn all_options() -> Vec<(&'static str, bool)> {
    tables()
        .iter()
        .flat_map(|t| (0..t.count()).map(|i| (t.name(i), t.takes(i) != optspec::Takes::Flag)))
        .collect()
}

/// Each module's table is the single source of its names: no name is
/// in two tables, and the unknown-option message lists exactly them.
#[test]
fn the_tables_are_the_single_source_of_names() {
    assert_eq!(optspec::duplicates(&tables()), Vec::<&str>::new());
    let names: Vec<String> = all_options()
        .iter()
        .map(|(n, _)| format!("--{n}"))
        .collect();
    let e = err(&["--bogus"]);
    let listed = e
        .strip_prefix("unknown option '--bogus'; known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    for (name, _) in all_options() {
        assert!(
            !parse(&[&format!("--{name}=")]).is_err_and(|e| e.0.starts_with("unknown option")),
            "--{name}"
        );
    }
}

/// The option table of docs/rate_limit.md lists exactly the tables'
/// names, in the order the unknown-option message lists them (the tables'
/// order): an option added to one and not the other, or moved in one,
/// fails here, so the message's order changes only with the docs.
#[test]
fn the_docs_list_exactly_the_tables_names_in_their_order() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rate_limit.md");
    let md = std::fs::read_to_string(path).expect("docs/rate_limit.md");
    let documented =
        optspec::documented_in_order(&md, "Options", "--").expect("an Options section");
    let known: Vec<&str> = all_options().iter().map(|(n, _)| *n).collect();
    assert_eq!(documented, known);
    let docs = (args::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::peering::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::store::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::fair::OPTIONS.iter().map(|o| o.doc))
        .chain(args::ROLLOUT.iter().map(|o| o.doc));
    assert_eq!(docs.filter(|d| d.is_empty()).count(), 0);
}

/// The table numbers the parser dispatches on name the tables they say.
#[test]
fn the_table_numbers_match_the_tables() {
    let t = tables();
    let first = |i: usize| t[i].name(0);
    assert_eq!(first(RULE), args::OPTIONS[0].name);
    assert_eq!(first(PEERS), crate::peering::OPTIONS[0].name);
    assert_eq!(first(STORE), crate::store::OPTIONS[0].name);
    assert_eq!(first(FAIR), crate::fair::OPTIONS[0].name);
    assert_eq!(first(ROLLOUT_TABLE), args::ROLLOUT[0].name);
    assert_eq!(t.len(), 5);
}

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
        "--limit has an invalid value 'abc': allowed an integer from 1 to 4294967295"
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
        "--limit has an invalid value '4294967296': allowed an integer from 1 to 4294967295"
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
        "--limit has an invalid value ' 5': allowed an integer from 1 to 4294967295"
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
            "--limit has an invalid value '{}…' (10240 bytes): allowed an integer from 1 to 4294967295",
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
        "--limit has an invalid value '1\\u{1}': allowed an integer from 1 to 4294967295"
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

#[test]
fn count_status_needs_rate_and_not_conntrack() {
    let o = parse(&[
        "--rate=1",
        "--burst=5",
        "--key=ip",
        "--count-status=401,5xx",
    ])
    .unwrap();
    let c = o.count_status.unwrap();
    assert!(c.contains(401) && c.contains(503) && !c.contains(200) && !c.contains(403));
    assert!(o
        .describe()
        .contains("rate=1/s burst 5 charged by responses 401,500-599"));
    assert!(o
        .limiter_options()
        .contains(&("count-status", "401,500-599".to_owned())));
    assert_eq!(parse(&["--rate=1"]).unwrap().count_status, None);
    assert_eq!(
        err(&["--rate=1", "--count-status=6xx"]),
        format!(
            "--count-status has an invalid value '6xx': allowed {}",
            crate::status::ALLOWED
        )
    );
    assert_eq!(
        err(&["--count-status=401"]),
        "--count-status needs --rate (responses with a listed status charge the rate bucket)"
    );
    assert_eq!(
        err(&["--limit=5", "--count-status=401"]),
        "--count-status needs --rate (responses with a listed status charge the rate bucket)"
    );
    assert!(err(&["--rate=1", "--conntrack", "--count-status=401"])
        .starts_with("--count-status cannot be combined with --conntrack"));
    // With --limit it applies to the rate only: the limit still counts requests.
    let o = parse(&["--rate=1", "--limit=2", "--count-status=4xx"]).unwrap();
    assert_eq!((o.limit, o.rate, o.burst), (Some(2), Some(1.0), 1));
    assert!(o.count_status.is_some());
    // With a group, peers and the store, as with --rate alone.
    let o = parse(&[
        "--rate=1",
        "--key=ip",
        "--group=login",
        "--count-status=401",
    ])
    .unwrap();
    assert_eq!(o.group.as_deref(), Some("login"));
    let o = parse(&[
        "--rate=1",
        "--key=ip",
        "--group=login",
        "--peers=127.0.0.1:5000",
        "--peer-secret-file=/etc/trafficserver/peer.key",
        "--count-status=401",
    ])
    .unwrap();
    assert!(o.peer.is_some() && o.count_status.is_some());
    let o = parse(&[
        "--rate=1",
        "--key=ip",
        "--store=redis://127.0.0.1:6379",
        "--count-status=401",
    ])
    .unwrap();
    assert!(o.store.is_some() && o.count_status.is_some());
}

#[test]
fn key_options_parse_and_need_key() {
    let o = parse(&["--rate=5", "--key=ip,header:X-User", "--keys=1000"]).unwrap();
    let k = o.key.as_ref().unwrap();
    assert_eq!(k.sources.len(), 2);
    assert_eq!((k.v4_prefix, k.v6_prefix), (32, 64));
    assert_eq!(o.keys, 1000);
    assert_eq!(o.key_missing, crate::key::Missing::Shared);
    let o = parse(&[
        "--key=ip",
        "--key-prefix=24/48",
        "--key-missing=refuse",
        "--trusted-proxies=10.0.0.0/8,::1",
    ])
    .unwrap();
    let k = o.key.as_ref().unwrap();
    assert_eq!((k.v4_prefix, k.v6_prefix), (24, 48));
    assert_eq!(k.proxies.trusted.len(), 2);
    assert_eq!(o.key_missing, crate::key::Missing::Refuse);
    assert!(o.describe().contains("key=ip per key (prefix 24/48"));
    assert_eq!(parse(&["--limit=1"]).unwrap().key, None);

    assert!(err(&["--key=ip,host"]).starts_with(
        "--key has an invalid value 'ip,host': allowed ip, header:NAME, cookie:NAME or query:NAME"
    ));
    assert!(err(&["--key=ip", "--key-prefix=40/64"])
        .starts_with("--key-prefix has an invalid value '40/64'"));
    assert!(err(&["--key=ip", "--keys=0"]).starts_with("--keys has an invalid value '0'"));
    assert!(err(&["--key=ip", "--key-missing=drop"])
        .starts_with("--key-missing has an invalid value 'drop': allowed shared, pass or refuse"));
    assert!(err(&["--key=ip", "--trusted-proxies=lb"])
        .starts_with("--trusted-proxies has an invalid value 'lb': allowed IP addresses or CIDRs"));
    for opt in [
        "--keys=5",
        "--key-prefix=24/48",
        "--key-missing=pass",
        "--trusted-proxies=::1",
    ] {
        assert!(err(&[opt]).contains("needs --key"), "{opt}");
    }
    let o = parse(&["--key=header:X-A", "--trusted-proxies=10.0.0.1"]).unwrap();
    assert_eq!(
        o.warnings,
        ["--trusted-proxies has no effect without ip in --key"]
    );
}

#[test]
fn rollout_options_parse() {
    let o = parse(&[
        "--rate=5",
        "--dry-run",
        "--log=refusals",
        "--exempt=10.0.0.0/8, ::1",
    ])
    .unwrap();
    assert!(o.dry_run);
    assert_eq!(o.log.as_deref(), Some("refusals"));
    let e = o.exempt.as_ref().unwrap();
    assert_eq!(e.nets.len(), 2);
    assert!(e.covers("10.1.2.3".parse().unwrap()));
    assert!(e.covers("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!e.covers("11.0.0.1".parse().unwrap()));
    assert!(o
        .describe()
        .contains(" dry-run exempt=2 network(s) log=refusals.log"));
    // The .log suffix is optional.
    assert_eq!(parse(&["--log=rl.log"]).unwrap().log.as_deref(), Some("rl"));
    // Near a reserved name is fine.
    for ok in ["diags2", "ctl", "my_ctl_x", "squid-refusals", "rate_limit"] {
        assert_eq!(
            parse(&[&format!("--log={ok}")]).unwrap().log.as_deref(),
            Some(ok)
        );
    }
    let d = parse(&[]).unwrap();
    assert!(!d.dry_run && d.exempt.is_none() && d.log.is_none());
    // Per-rule options: a group's rules need not agree on them.
    assert_eq!(
        parse(&["--dry-run", "--exempt=::1", "--log=a"])
            .unwrap()
            .limiter_options(),
        d.limiter_options()
    );
}

#[test]
fn rollout_option_errors() {
    assert_eq!(
        err(&["--exempt=10.0.0.0/33"]),
        "--exempt has an invalid value '10.0.0.0/33': allowed IP addresses or CIDRs, comma-separated"
    );
    assert_eq!(
        err(&["--exempt="]),
        "--exempt has an invalid value '': allowed IP addresses or CIDRs, comma-separated"
    );
    let allowed = format!("allowed {LOG_NAMES_ALLOWED}");
    assert!(allowed.contains("not *_ctl, not diags, error, traffic, manager, squid"));
    for bad in [
        "../x",
        "a b",
        "",
        ".hidden",
        "rate_limit_ctl",
        "throttle_ctl.log",
        ".log",
        "diags",
        "diags.log",
        "diags.log.log",
        "a.b",
        "error",
        "traffic",
        "manager",
        "squid.log",
        "Squid",
        "throttle",
        "ip_throttle",
    ] {
        assert_eq!(
            err(&[&format!("--log={bad}")]),
            format!("--log has an invalid value {}: {allowed}", quote(bad))
        );
    }
    assert!(err(&[&format!("--log={}", "a".repeat(65))]).starts_with("--log has an invalid value"));
    assert_eq!(
        err(&["--dry-run=yes"]),
        "--dry-run takes no value (got 'yes')"
    );
}

/// The docs' example: the proxies' own network exempt. A client they do
/// not name is not exempt with them; one they name inside it is.
#[test]
fn an_unknown_client_behind_a_trusted_proxy_is_never_exempt() {
    let o = parse(&[
        "--rate=5",
        "--exempt=10.0.0.0/8",
        "--trusted-proxies=10.0.0.0/8",
    ])
    .unwrap();
    let e = o.exempt.unwrap();
    let client = |xff: Option<&str>| {
        let p = &e.proxies;
        let remote = "10.1.1.1".parse().unwrap();
        forwarded::client_ip(&p.trusted, p.forwarded, remote, |_| {
            xff.map(|v| v.as_bytes().to_vec())
        })
    };
    for xff in [Some("unknown"), Some("_hidden"), Some("6.6.6.6, bad"), None] {
        assert!(!e.exempts(client(xff)), "{xff:?}");
    }
    assert!(e.exempts(client(Some("10.9.9.9"))));
    assert!(!e.exempts(client(Some("192.0.2.7"))));
    let every = parse(&["--rate=5", "--exempt=0.0.0.0/0,::/0"]).unwrap();
    assert!(!every.exempt.unwrap().exempts(forwarded::Client::Unknown));
}

#[test]
fn exempt_follows_trusted_proxies_with_or_without_key() {
    // Without --key, --trusted-proxies and --forwarded-header serve --exempt.
    let o = parse(&[
        "--exempt=192.0.2.0/24",
        "--trusted-proxies=127.0.0.2",
        "--forwarded-header=Forwarded",
    ])
    .unwrap();
    let e = o.exempt.unwrap();
    assert_eq!(e.proxies.trusted.len(), 1);
    assert_eq!(e.proxies.forwarded, crate::key::ForwardedHeader::Forwarded);
    assert!(o.key.is_none() && o.warnings.is_empty());
    // With --key, the key's trusted proxies.
    let o = parse(&["--key=ip", "--exempt=::1", "--trusted-proxies=10.0.0.1"]).unwrap();
    assert_eq!(
        o.exempt.unwrap().proxies.trusted,
        o.key.unwrap().proxies.trusted
    );
    // With a key that is not ip they serve --exempt: no warning.
    let o = parse(&[
        "--key=header:X",
        "--exempt=192.0.2.0/24",
        "--trusted-proxies=10.0.0.1",
    ])
    .unwrap();
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    assert_eq!(o.exempt.unwrap().proxies.trusted.len(), 1);
    // Still refused without either.
    assert_eq!(
        err(&["--trusted-proxies=10.0.0.1"]),
        "--trusted-proxies needs --key (it configures per-client keys)"
    );
    assert_eq!(
        parse(&["--exempt=::1", "--forwarded-header=Forwarded"])
            .unwrap()
            .warnings,
        ["--forwarded-header has no effect without --trusted-proxies"]
    );
}

#[test]
fn dry_run_combinations() {
    // Decided here, at remap: a dry run works as it does alone.
    let fair = parse(&["--limit=4", "--fair=ip", "--dry-run"]).unwrap();
    assert!(fair.dry_run && fair.fair.is_some());
    let peers = parse(&[
        "--rate=5",
        "--key=ip",
        "--dry-run",
        "--peers=127.0.0.1:7000",
        "--peer-secret-file=peer.key",
        "--group=g",
    ]);
    assert!(
        peers.as_ref().is_ok_and(|o| o.dry_run && o.peer.is_some()),
        "{peers:?}"
    );
    // Decided in Redis after remap: the request does not wait for it
    // (the plugin counts the reply when it comes).
    for store in [
        &["--rate=5", "--dry-run", "--store=redis://127.0.0.1:6379"][..],
        &[
            "--rate=5",
            "--key=ip",
            "--dry-run",
            "--store=redis://127.0.0.1:6379",
            "--store-sync=100",
        ],
    ] {
        let o = parse(store).unwrap();
        assert!(
            o.dry_run && o.store.is_some() && o.warnings.is_empty(),
            "{o:?}"
        );
    }
    // With --count-status Redis's verdict comes too late for any charge:
    // such a dry run could show no refusal, so it is refused.
    let e = err(&[
        "--rate=5",
        "--count-status=401",
        "--dry-run",
        "--store=redis://127.0.0.1:6379",
    ]);
    assert!(
        e.starts_with("--dry-run cannot be combined with --store and --count-status: "),
        "{e}"
    );
    // Decided here with --store-sync (or without --dry-run): allowed.
    let sync = parse(&[
        "--rate=5",
        "--key=ip",
        "--count-status=401",
        "--dry-run",
        "--store=redis://127.0.0.1:6379",
        "--store-sync=100",
    ]);
    assert!(sync.is_ok_and(|o| o.dry_run), "--store-sync");
    assert!(
        parse(&["--rate=5", "--count-status=401", "--store=redis://h"])
            .is_ok_and(|o| o.store_counts_status())
    );
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

/// What groups compare and `show` reports names options the tables know
/// (`peers`, `store` and `fair` stand for their modules' options).
#[test]
fn the_limiter_options_are_named_as_the_tables_name_them() {
    let known: Vec<&str> = all_options().iter().map(|(n, _)| *n).collect();
    for (name, _) in parse(&[]).unwrap().limiter_options() {
        assert!(known.contains(&name), "--{name} is in no table");
    }
}
