//! `--block` and what it combines with.

use super::*;

#[test]
fn block_needs_the_rate_and_this_proxys_own_state() {
    let o = parse(&["--rate=1", "--key=ip", "--block=30"]).unwrap();
    assert_eq!(o.block_nanos(), Some(30 * limits::NANOS_PER_SEC));
    assert_eq!(parse(&["--rate=1"]).unwrap().block_nanos(), None);
    // Peers hear of blocks in the next report.
    let o = parse(&[
        "--rate=1",
        "--key=ip",
        "--group=g",
        "--peers=127.0.0.1:5000",
        "--peer-secret-file=peer.key",
        "--block=3",
    ])
    .unwrap();
    assert!(o.peer.is_some() && o.block_s == 3);
    // Both --store modes keep blocks in Redis.
    let o = parse(&[
        "--rate=1",
        "--key=ip",
        "--store=redis://127.0.0.1:6379",
        "--store-sync=100",
        "--block=3",
    ])
    .unwrap();
    assert_eq!(o.block_s, 3);
    let o = parse(&["--rate=1", "--store=redis://127.0.0.1:6379", "--block=3"]).unwrap();
    assert_eq!(o.block_s, 3);
    for (args, want) in [
        (
            &["--limit=5", "--block=3"][..],
            "--block=3: it needs --rate",
        ),
        (
            &["--rate=1", "--block=0"][..],
            "--block has an invalid value '0': allowed an integer from 1 to 86400",
        ),
        (
            &["--rate=1", "--block=86401"][..],
            "--block has an invalid value '86401'",
        ),
    ] {
        let e = err(args);
        assert!(e.starts_with(want), "{args:?}: {e}");
    }
}
