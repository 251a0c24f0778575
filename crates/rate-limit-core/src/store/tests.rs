use crate::options::Options;

use super::*;

fn parse(args: &[&str]) -> Result<Options, OptionError> {
    Options::parse("http://cdn.example.com/", args)
}

fn addr(host: &str, port: u16, db: i64) -> store_url::Addr {
    store_url::Addr {
        host: host.into(),
        port,
        db,
    }
}

fn err(args: &[&str]) -> String {
    parse(args).expect_err("must be rejected").0
}

#[test]
fn fair_shares_are_not_combined_with_a_store() {
    assert_eq!(
        err(&["--limit=4", "--fair=ip", "--store=redis://h"]),
        "--fair cannot be combined with --store (Redis decides the rule's slots)"
    );
}

#[test]
fn defaults_and_every_option() {
    let o = parse(&["--rate=5", "--store=redis://127.0.0.1:6380"]).unwrap();
    let s = o.store.unwrap();
    assert_eq!(s.redis, Target::Node(addr("127.0.0.1", 6380, 0)));
    assert_eq!(
        (s.timeout_ms, s.failure, s.lease_ttl_s),
        (50, Failure::Local, 60)
    );
    assert_eq!(s.namespace, "http.cdn.example.com");
    let o = parse(&[
        "--limit=3",
        "--group=api",
        "--store=redis://[::1]:7000/2",
        "--store-timeout=20",
        "--store-failure=closed",
        "--lease-ttl=5",
    ])
    .unwrap();
    let s = o.store.unwrap();
    assert_eq!(s.redis, Target::Node(addr("::1", 7000, 2)));
    assert_eq!(
        (s.timeout_ms, s.failure, s.lease_ttl_s),
        (20, Failure::Closed, 5)
    );
    assert_eq!(
        (s.url().as_str(), s.namespace.as_str()),
        ("redis://[::1]:7000/2", "api")
    );
    assert_eq!(
        parse(&["--store=redis://cache.local"])
            .unwrap()
            .store
            .unwrap()
            .redis,
        Target::Node(addr("cache.local", 6379, 0))
    );
    let o = parse(&[
        "--rate=5",
        "--store=redis+cluster://127.0.0.1:7000,[::1]:7001",
    ])
    .unwrap();
    let s = o.store.unwrap();
    assert_eq!(
        s.redis,
        Target::Cluster(vec![addr("127.0.0.1", 7000, 0), addr("::1", 7001, 0)])
    );
    assert_eq!(s.url(), "redis+cluster://127.0.0.1:7000,[::1]:7001");
    assert!(parse(&["--limit=1"]).unwrap().store.is_none());
}

#[test]
fn errors_name_option_value_and_allowed() {
    for bad in [
        "http://x:1",
        "redis://",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:1/x",
        "redis://h:1/70000",
        "redis://bad host:1",
        "redis://[zz]:1",
    ] {
        let e = err(&[&format!("--store={bad}")]);
        assert!(
            e.starts_with(&format!(
                "--store has an invalid value '{bad}': allowed redis://HOST"
            )),
            "{e}"
        );
    }
    assert_eq!(
        err(&["--store=redis+cluster://h:1/0"]),
        format!(
            "--store has an invalid value 'redis+cluster://h:1/0': allowed {}",
            store_url::CLUSTER_ALLOWED
        )
    );
    assert!(err(&["--store=rediss://h:1"]).starts_with("--store has an unsupported value"));
    assert_eq!(
        err(&["--store=redis://h", "--store-timeout=0"]),
        "--store-timeout has an invalid value '0': allowed an integer from 1 to 10000 (milliseconds)"
    );
    assert_eq!(
        err(&["--store=redis://h", "--store-failure=maybe"]),
        "--store-failure has an invalid value 'maybe': allowed open, closed or local"
    );
    assert!(err(&["--store=redis://h", "--lease-ttl=0"])
        .starts_with("--lease-ttl has an invalid value '0'"));
    assert_eq!(
        err(&["--lease-ttl=5"]),
        "--lease-ttl needs --store (it configures how Redis decides the rule)"
    );
    assert!(err(&["--store=redis://h", "--conntrack"]).contains("--conntrack"));
    assert!(err(&["--store=redis://h", "--tag=a{b}"]).starts_with("--store needs --group here"));
    let o = parse(&[
        "--rate=5",
        "--key=ip",
        "--store=redis://h",
        "--store-sync=100",
    ])
    .unwrap();
    assert_eq!(o.store.unwrap().sync_ms, Some(100));
    assert!(err(&["--rate=5", "--store=redis://h", "--store-sync=100"])
        .starts_with("--store-sync needs --key"));
    assert!(err(&[
        "--rate=5",
        "--limit=2",
        "--key=ip",
        "--store=redis://h",
        "--store-sync=100"
    ])
    .starts_with("--store-sync shares rates only"));
    assert_eq!(
        err(&["--store=redis://h", "--store-sync=5"]),
        "--store-sync has an invalid value '5': allowed an integer from 10 to 60000 (milliseconds)"
    );
}
