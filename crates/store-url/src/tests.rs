use super::*;

#[test]
fn redis_urls() {
    let a = |host: &str, port, db| {
        Target::Node(Addr {
            host: host.into(),
            port,
            db,
        })
    };
    assert_eq!(redis("redis://h"), Ok(a("h", 6379, 0)));
    assert_eq!(redis("redis://h:7000/3"), Ok(a("h", 7000, 3)));
    assert_eq!(redis("redis://[::1]:7000/"), Ok(a("::1", 7000, 0)));
    assert_eq!(redis("redis://10.0.0.1"), Ok(a("10.0.0.1", 6379, 0)));
    for bad in [
        "redis://",
        "redis://h:0",
        "redis://h:65536",
        "redis://h/65536",
        "redis://h/x",
        "redis://[zz]",
        "redis://h h",
        "http://h",
        "redis://h:+1",
        "redis://[::1]x",
    ] {
        assert_eq!(redis(bad), Err(UrlError::Invalid(REDIS_ALLOWED)), "{bad}");
    }
    assert!(matches!(
        redis("rediss://h:1"),
        Err(UrlError::Unsupported(_))
    ));
}

#[test]
fn cluster_urls() {
    let seed = |host: &str, port| Addr {
        host: host.into(),
        port,
        db: 0,
    };
    let t = redis("redis+cluster://10.0.0.1:7000,cache.example,[::1]:7002").unwrap();
    assert_eq!(
        t,
        Target::Cluster(vec![
            seed("10.0.0.1", 7000),
            seed("cache.example", 6379),
            seed("::1", 7002)
        ])
    );
    assert_eq!(
        t.url(),
        "redis+cluster://10.0.0.1:7000,cache.example:6379,[::1]:7002"
    );
    for bad in [
        "redis+cluster://",
        "redis+cluster://h:1,",
        "redis+cluster://h:0",
        "redis+cluster://h:1/0",
        "redis+cluster://h:1,h:2/3",
        "redis+cluster://[zz]:1",
        "redis+cluster://h h:1",
    ] {
        assert_eq!(redis(bad), Err(UrlError::Invalid(CLUSTER_ALLOWED)), "{bad}");
    }
    let many = vec!["h:1"; MAX_SERVERS + 1].join(",");
    assert!(redis(&format!("redis+cluster://{many}")).is_err());
    assert!(CLUSTER_ALLOWED.contains("no /DB"));
}

#[test]
fn memcached_urls() {
    assert_eq!(
        memcached("memcached://10.0.0.1:11211,cache.example:11212,[::1]:11213"),
        Ok(vec![
            "10.0.0.1:11211".into(),
            "cache.example:11212".into(),
            "[::1]:11213".into()
        ])
    );
    assert_eq!(memcached("memcache://h:1"), Ok(vec!["h:1".into()]));
    for bad in [
        "memcached://",
        "memcached://h",
        "memcached://h:0",
        "memcached://h:1,",
        "memcached://[zz]:1",
        "memcached://h h:1",
        "redis://h:1",
    ] {
        assert_eq!(
            memcached(bad),
            Err(UrlError::Invalid(MEMCACHED_ALLOWED)),
            "{bad}"
        );
    }
    let many = vec!["h:1"; MAX_SERVERS + 1].join(",");
    assert!(memcached(&format!("memcached://{many}")).is_err());
}

#[test]
fn either() {
    assert!(matches!(
        parse("memcached://h:1"),
        Ok(StoreUrl::Memcached(_))
    ));
    assert!(matches!(parse("redis://h"), Ok(StoreUrl::Redis(_))));
    assert_eq!(
        parse("memcached://h"),
        Err(UrlError::Invalid(EITHER_ALLOWED))
    );
    assert_eq!(parse("ftp://h"), Err(UrlError::Invalid(EITHER_ALLOWED)));
    assert!(matches!(
        parse("redis+cluster://h:1,h:2"),
        Ok(StoreUrl::Redis(Target::Cluster(s))) if s.len() == 2
    ));
    assert_eq!(
        parse("redis+cluster://h:1/0"),
        Err(UrlError::Invalid(CLUSTER_ALLOWED))
    );
    assert_eq!(
        parse("redis://h:1/2").map(|u| u.url()),
        Ok("redis://h:1/2".into())
    );
}
