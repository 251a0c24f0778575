use super::*;

/// A stand-in limiter that records the options applied to it.
#[derive(Debug)]
struct Fake {
    applied: parking_lot::Mutex<Vec<Options>>,
}

fn opts(args: &[&str]) -> Options {
    Options::parse("http://a.example/", args).expect("valid options")
}

fn make(_: &Options) -> Arc<Fake> {
    Arc::new(Fake {
        applied: parking_lot::Mutex::new(Vec::new()),
    })
}

fn apply(l: &Fake, o: &Options) {
    l.applied.lock().push(o.clone());
}

/// Loads one configuration: each rule `(options, owner)` joins; then commit.
fn load(
    r: &mut Registry<Fake>,
    rules: &[(&[&str], &str)],
) -> (Vec<Result<Arc<Fake>, String>>, Vec<Change>) {
    r.begin();
    let got = rules
        .iter()
        .map(|(args, owner)| {
            let o = opts(args);
            let (from, to) = ("http://a.example/", "http://origin/");
            let id = Registry::<Fake>::identity(&o, from, to, r.place(from, to));
            r.join(&id, &o, owner, make)
        })
        .collect();
    let changes = r.commit(apply);
    (got, changes)
}

#[test]
fn rules_of_a_group_share_one_limiter() {
    let mut r = Registry::default();
    let (got, changes) = load(
        &mut r,
        &[
            (&["--group=g", "--limit=3"], "a"),
            (&["--group=g", "--limit=3", "--tag=x"], "b"),
        ],
    );
    let (a, b) = (got[0].as_ref().unwrap(), got[1].as_ref().unwrap());
    assert!(Arc::ptr_eq(a, b), "per-rule options (--tag) may differ");
    assert_eq!(
        changes,
        [Change::Created {
            id: "group g".into(),
            restarted: None
        }]
    );
}

#[test]
fn a_conflict_in_one_configuration_names_the_option_and_the_other_rule() {
    let mut r = Registry::default();
    let (got, _) = load(
        &mut r,
        &[
            (&["--group=g", "--limit=3"], "http://one/"),
            (&["--group=g", "--limit=4"], "http://two/"),
        ],
    );
    assert!(got[0].is_ok());
    let e = got[1].as_ref().expect_err("conflict");
    assert!(
        e.starts_with("--limit=4 conflicts with --limit=3 of the rule http://one/"),
        "{e}"
    );
    assert!(e.contains("--group=g"), "{e}");
    // Shape differences conflict too.
    let (got, _) = load(
        &mut r,
        &[
            (&["--group=g", "--limit=3"], "a"),
            (&["--group=g", "--limit=3", "--key=ip"], "b"),
        ],
    );
    let e = got[1].as_ref().expect_err("conflict");
    assert!(e.starts_with("--key=ip conflicts with --key=none"), "{e}");
}

#[test]
fn a_reload_keeps_the_limiter_and_applies_changed_values_at_commit() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    let first = first.into_iter().next().unwrap().unwrap();

    let (same, changes) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    assert!(Arc::ptr_eq(&first, same[0].as_ref().unwrap()));
    assert!(changes.is_empty());
    assert!(first.applied.lock().is_empty());

    r.begin();
    let o = opts(&["--group=g", "--limit=5", "--queue=2"]);
    let again = r.join("group g", &o, "a", make).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert!(
        first.applied.lock().is_empty(),
        "nothing applies before the commit"
    );
    let changes = r.commit(apply);
    assert_eq!(
        changes,
        [Change::Changed {
            id: "group g".into(),
            values: vec![
                ("limit", "3".into(), "5".into()),
                ("queue", u32::MAX.to_string(), "2".into())
            ],
            overrode_live: false,
        }]
    );
    assert_eq!(first.applied.lock().last().and_then(|o| o.limit), Some(5));
}

#[test]
fn a_changed_shape_gets_a_new_limiter() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    let first = first.into_iter().next().unwrap().unwrap();
    let (next, changes) = load(&mut r, &[(&["--group=g", "--limit=3", "--key=ip"], "a")]);
    assert!(!Arc::ptr_eq(&first, next[0].as_ref().unwrap()));
    assert_eq!(
        changes,
        [Change::Created {
            id: "group g".into(),
            restarted: Some("key")
        }]
    );
    // Adding a rate changes the shape as well.
    let (rated, _) = load(
        &mut r,
        &[(&["--group=g", "--limit=3", "--key=ip", "--rate=5"], "a")],
    );
    assert!(!Arc::ptr_eq(
        next[0].as_ref().unwrap(),
        rated[0].as_ref().unwrap()
    ));
}

#[test]
fn a_refused_configuration_changes_nothing() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    let first = first.into_iter().next().unwrap().unwrap();
    r.begin();
    let o = opts(&["--group=g", "--limit=9"]);
    assert!(Arc::ptr_eq(
        &first,
        &r.join("group g", &o, "a", make).unwrap()
    ));
    r.abort();
    assert!(first.applied.lock().is_empty());
    // The next load compares against the options in force (3), not the refused 9.
    let (_, changes) = load(&mut r, &[(&["--group=g", "--limit=9"], "a")]);
    assert_eq!(
        changes,
        [Change::Changed {
            id: "group g".into(),
            values: vec![("limit", "3".into(), "9".into())],
            overrode_live: false,
        }]
    );
    // A begin without commit (ATS never told the outcome) drops the claim too.
    r.begin();
    let o = opts(&["--group=g", "--limit=1"]);
    r.join("group g", &o, "a", make).unwrap();
    let (_, changes) = load(&mut r, &[(&["--group=g", "--limit=9"], "a")]);
    assert!(changes.is_empty());
}

#[test]
fn rules_without_a_group_find_their_own_limiter_again() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--limit=3"], "a"), (&["--rate=5"], "a")]);
    let (again, changes) = load(&mut r, &[(&["--limit=4"], "a"), (&["--rate=5"], "a")]);
    for i in 0..2 {
        assert!(Arc::ptr_eq(
            first[i].as_ref().unwrap(),
            again[i].as_ref().unwrap()
        ));
    }
    assert!(!Arc::ptr_eq(
        first[0].as_ref().unwrap(),
        first[1].as_ref().unwrap()
    ));
    assert_eq!(changes.len(), 1, "only the first rule changed: {changes:?}");
}

#[test]
fn a_limiter_no_rule_holds_is_forgotten() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    let weak = Arc::downgrade(first[0].as_ref().unwrap());
    drop(first);
    assert!(weak.upgrade().is_none());
    let (_, changes) = load(&mut r, &[(&["--group=other"], "a")]);
    assert!(r.live().iter().all(|(id, _, _)| id != "group g"));
    assert_eq!(changes.len(), 1);
    assert!(r.entries.len() <= 1, "no entry kept for a dead limiter");
}

#[test]
fn a_live_change_lasts_until_the_file_is_loaded_again() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    let live = opts(&["--group=g", "--limit=8"]);
    assert!(r.set_live("group g", live));
    assert!(!r.set_live("group nobody", opts(&[])));
    assert_eq!(r.live()[0].2.limit, Some(8));
    // remap.config loaded again with its 3: the file wins.
    let (_, changes) = load(&mut r, &[(&["--group=g", "--limit=3"], "a")]);
    assert_eq!(
        changes,
        [Change::Changed {
            id: "group g".into(),
            values: vec![("limit", "8".into(), "3".into())],
            overrode_live: true,
        }]
    );
    let l = first[0].as_ref().unwrap();
    assert_eq!(l.applied.lock().last().and_then(|o| o.limit), Some(3));
    // The file's values are in force now: a later change is not a live one's.
    let (_, changes) = load(&mut r, &[(&["--group=g", "--limit=4"], "a")]);
    assert!(
        matches!(
            &changes[..],
            [Change::Changed {
                overrode_live: false,
                ..
            }]
        ),
        "{changes:?}"
    );
}

#[test]
fn a_first_entry_learns_it_is_followed_and_a_new_generation_starts_over() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut r = Registry::<Fake>::default();
    r.begin();
    let (a, b) = ("http://a.example/", "http://origin/");
    assert_eq!(r.place(a, b), 1);
    let first = r.followed(a, b);
    assert_eq!(r.place("http://other/", b), 1);
    assert!(
        !first.load(Relaxed),
        "another rule's entry does not follow it"
    );
    assert_eq!(r.place(a, b), 2);
    assert!(
        first.load(Relaxed),
        "a second entry on the same URLs follows it"
    );
    r.begin();
    assert_eq!(r.place(a, b), 1);
    assert!(
        !r.followed(a, b).load(Relaxed),
        "each generation counts anew"
    );
}

/// rate_limit's `--store-sync` exchange is one per limiter and store
/// settings (plugins/rate_limit/src/central/sync.rs): it relies on any change
/// of them (the URL, the timeout, the period, the namespace: `--group`, or
/// `--tag` without one) giving the rules a new limiter, never the live one.
#[test]
fn a_changed_store_gets_a_new_limiter() {
    const S1: &str = "--store=redis://127.0.0.1:1";
    const S2: &str = "--store=redis://127.0.0.1:2";
    const P1: &str = "--store-sync=100";
    let cases: [(&[&str], &[&str], &str); 4] = [
        (&["--group=g", S1, P1], &["--group=g", S2, P1], "group g"),
        (
            &["--group=g", S1, P1],
            &["--group=g", S1, P1, "--store-timeout=99"],
            "group g",
        ),
        (
            &["--group=g", S1, P1],
            &["--group=g", S1, "--store-sync=200"],
            "group g",
        ),
        (
            &["--tag=a", S1, P1],
            &["--tag=b", S1, P1],
            "rule http://a.example/ http://origin/ #1",
        ),
    ];
    for (before, after, id) in cases {
        let args = |x: &[&'static str]| -> Vec<&'static str> {
            ["--rate=5", "--key=ip"].iter().chain(x).copied().collect()
        };
        let mut r = Registry::default();
        let (first, _) = load(&mut r, &[(&args(before), "a")]);
        let (next, changes) = load(&mut r, &[(&args(after), "a")]);
        let (first, next) = (first[0].as_ref().unwrap(), next[0].as_ref().unwrap());
        assert!(!Arc::ptr_eq(first, next), "{after:?}");
        assert_eq!(
            changes,
            [Change::Created {
                id: id.into(),
                restarted: Some("store")
            }],
            "{after:?}"
        );
    }
}

/// `--count-status`'s presence is part of the limiter's shape (its rate is
/// checked, not taken): adding it gets a new limiter. Its list is not (each
/// rule charges by its own): a list change keeps the limiter and its
/// lock-outs, and rules of a group may list different statuses (they had
/// to agree before).
#[test]
fn count_status_is_part_of_the_shape() {
    let mut r = Registry::default();
    let (first, _) = load(&mut r, &[(&["--group=g", "--rate=1"], "a")]);
    let first = first.into_iter().next().unwrap().unwrap();
    let (next, changes) = load(
        &mut r,
        &[(&["--group=g", "--rate=1", "--count-status=401"], "a")],
    );
    let next = next.into_iter().next().unwrap().unwrap();
    assert!(!Arc::ptr_eq(&first, &next));
    assert_eq!(
        changes,
        [Change::Created {
            id: "group g".into(),
            restarted: Some("count-status")
        }]
    );
    let (got, _) = load(
        &mut r,
        &[
            (&["--group=g", "--rate=1", "--count-status=401"], "a"),
            (&["--group=g", "--rate=1", "--count-status=403"], "b"),
        ],
    );
    let (a, b) = (got[0].as_ref().unwrap(), got[1].as_ref().unwrap());
    assert!(Arc::ptr_eq(a, b), "one limiter for the group");
    assert!(Arc::ptr_eq(&next, a), "carried over");
}

/// Editing the `--count-status` list on reload carries the limiter (and
/// so its lock-outs) over.
#[test]
fn a_count_status_list_change_carries_the_limiter_over() {
    let mut r = Registry::default();
    let args = |list: &'static str| -> Vec<&'static str> { vec!["--rate=1", "--key=ip", list] };
    let (first, _) = load(&mut r, &[(&args("--count-status=401"), "a")]);
    let (next, changes) = load(&mut r, &[(&args("--count-status=401,403"), "a")]);
    let (first, next) = (first[0].as_ref().unwrap(), next[0].as_ref().unwrap());
    assert!(Arc::ptr_eq(first, next), "{changes:?}");
    assert!(
        !changes.iter().any(|c| matches!(c, Change::Created { .. })),
        "{changes:?}"
    );
}

#[test]
fn a_change_tells_the_log_what_happened() {
    let lost = Change::Created {
        id: "api".into(),
        restarted: Some("key"),
    };
    let (level, msg) = lost.message().unwrap();
    assert_eq!(level, log::Level::Warn);
    assert!(
        msg.starts_with("api: --key changed, which live state cannot follow"),
        "{msg}"
    );
    let new = Change::Created {
        id: "api".into(),
        restarted: None,
    };
    assert_eq!(new.message(), None);
    let changed = Change::Changed {
        id: "api".into(),
        values: vec![("limit", "2".into(), "3".into())],
        overrode_live: true,
    };
    assert_eq!(
        changed.message(),
        Some((
            log::Level::Info,
            "api: applied live: --limit 2 -> 3 (remap.config overrides the values set live by \
             traffic_ctl plugin msg)"
                .to_owned()
        ))
    );
}

/// `--block` changes on the running limiter: its keys' blocks and buckets
/// carry over a reload that changes only the block's length.
#[test]
fn a_reload_that_changes_only_the_block_keeps_the_limiter() {
    let mut r = Registry::default();
    let args =
        |b: &'static str| -> Vec<&'static str> { vec!["--group=g", "--key=ip", "--rate=1", b] };
    let (first, _) = load(&mut r, &[(&args("--block=30"), "a")]);
    let first = first.into_iter().next().unwrap().unwrap();
    let (again, changes) = load(&mut r, &[(&args("--block=60"), "a")]);
    assert!(Arc::ptr_eq(&first, again[0].as_ref().unwrap()));
    assert_eq!(
        changes,
        [Change::Changed {
            id: "group g".into(),
            values: vec![("block", "30".into(), "60".into())],
            overrode_live: false,
        }]
    );
    assert_eq!(first.applied.lock().last().map(|o| o.block_s), Some(60));
}
