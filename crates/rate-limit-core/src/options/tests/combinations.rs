//! Options that depend on each other: --count-status, the key options,
//! rollout, --exempt behind trusted proxies, dry run.

use limits::quote::quote;

use super::*;

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
