//! `--store` and `--store-timeout`.

use super::*;

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
