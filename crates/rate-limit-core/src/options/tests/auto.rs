//! `--limit=auto`, its bounds, and what it cannot learn with.

use super::*;

#[test]
fn limit_auto_learns_within_its_bounds_and_excludes_what_it_cannot_learn() {
    let o = parse(&["--limit=auto"]).unwrap();
    let a = o.auto.unwrap();
    assert_eq!((a.min, a.max, o.limit), (4, 1000, Some(20)));
    let o = parse(&[
        "--limit=auto",
        "--limit-min=2",
        "--limit-max=10",
        "--rate=5",
    ])
    .unwrap();
    assert_eq!(o.auto.map(|a| (a.min, a.max)), Some((2, 10)));
    assert_eq!(o.limit, Some(10), "the start clamped into the bounds");
    // One bound given: the other's default moves out of its way.
    assert_eq!(
        parse(&["--limit=auto", "--limit-max=2"])
            .unwrap()
            .auto
            .map(|a| a.min),
        Some(2)
    );
    assert_eq!(
        parse(&["--limit=auto", "--limit-min=2000"])
            .unwrap()
            .auto
            .map(|a| a.max),
        Some(2000)
    );
    for (args, want) in [
        (&["--limit-min=2"][..], "--limit-min needs --limit=auto"),
        (
            &["--limit=5", "--limit-max=9"][..],
            "--limit-max needs --limit=auto",
        ),
        (
            &["--limit=auto", "--limit-min=9", "--limit-max=3"][..],
            "--limit-min=9 is above --limit-max=3",
        ),
        (
            &["--limit=auto", "--key=ip"][..],
            "--limit=auto cannot be combined with --key",
        ),
        (
            &["--limit=auto", "--fair=ip"][..],
            "--limit=auto cannot be combined with --fair",
        ),
        (
            &["--limit=auto", "--conntrack"][..],
            "--limit=auto cannot be combined with --conntrack",
        ),
        (
            &["--limit=auto", "--store=redis://127.0.0.1:6379"][..],
            "--limit=auto cannot be combined with --store",
        ),
        (
            &["--limit=auto", "--limit-min=0"][..],
            "--limit-min has an invalid value '0'",
        ),
        (
            &["--limit=autox"][..],
            "--limit has an invalid value 'autox': allowed an integer",
        ),
    ] {
        let e = err(args);
        assert!(e.starts_with(want), "{args:?}: {e}");
    }
}
