//! Parameters given as items: forms, defaults, overrides, ids, errors and
//! their wording, the table as the single source of names.

use super::*;

#[test]
fn defaults_and_all_params() {
    assert_eq!(
        ok(&["max:5"]),
        Params {
            max: 5,
            auto: None,
            stale: 0,
            statfreq_ms: 0,
            id: None
        }
    );
    assert_eq!(
        ok(&["max:2000", "stale:3600", "statfreq:10000", "id:example-01"]),
        Params {
            max: 2000,
            auto: None,
            stale: 3600,
            statfreq_ms: 10000,
            id: Some("example-01".into())
        }
    );
}

#[test]
fn loose_forms() {
    assert_eq!(ok(&[" max = 7 "]).max, 7);
    assert_eq!(ok(&["\"max:7\""]).max, 7);
    assert_eq!(ok(&["max:'7'"]).max, 7);
    assert_eq!(ok(&["max:0"]).max, 0);
    assert_eq!(ok(&["max:4294967295"]).max, u32::MAX);
}

#[test]
fn later_items_override_earlier_ones() {
    let mem = Mem::default().with("/etc/ts/base.config", "max:10\nstale:5\n");
    let p = run(&["file:base.config", "max:3"], &mem).expect("valid");
    assert_eq!((p.max, p.stale), (3, 5));
    let p = run(&["max:3", "file:base.config"], &mem).expect("valid");
    assert_eq!(p.max, 10);
}

#[test]
fn missing_max() {
    let e = err(&["stale:10"], &Mem::default());
    assert!(e.contains("missing required parameter 'max'"), "{e}");
    let e = err(&[], &Mem::default());
    assert!(e.contains("'max'"), "{e}");
}

#[test]
fn bad_numbers_name_param_and_value() {
    let cases = [
        (
            "max:abc",
            "parameter 'max' has an invalid value 'abc' at @pparam=max:abc: not a whole number",
        ),
        (
            "max:-1",
            "parameter 'max' has an invalid value '-1' at @pparam=max:-1: negative values",
        ),
        ("stale:1.5", "parameter 'stale' has an invalid value '1.5'"),
        (
            "stale:0x10",
            "parameter 'stale' has an invalid value '0x10'",
        ),
        (
            "statfreq:99999999999",
            "parameter 'statfreq' has an invalid value '99999999999'",
        ),
        ("max:+3", "parameter 'max' has an invalid value '+3'"),
        (
            "statfreq:50",
            "parameter 'statfreq' has an invalid value '50' at @pparam=statfreq:50: \
             expected 0 (no statistics lines) or at least 100",
        ),
        ("max:", "parameter 'max' has an empty value at @pparam=max:"),
        ("max", "expected name:value, got 'max' at @pparam=max"),
    ];
    for (opt, want) in cases {
        let e = err(&["max:1", opt], &Mem::default());
        assert!(e.contains(want), "{opt}: {e}");
    }
}

#[test]
fn ids() {
    assert_eq!(
        ok(&["max:1", "id:a.b-c_d/1"]).id.as_deref(),
        Some("a.b-c_d/1")
    );
    let e = err(&["max:1", "id:\"a b\""], &Mem::default());
    assert!(
        e.starts_with("parameter 'id' has an invalid value 'a b'") && e.contains("spaces"),
        "{e}"
    );
    let long = format!("id:{}", "x".repeat(MAX_ID_LEN + 1));
    assert!(err(&["max:1", &long], &Mem::default()).contains("longer than"));
    // A name never starts with '-' (issue 30: names that look like options).
    let e = err(&["max:1", "id:--dry"], &Mem::default());
    assert!(e.ends_with("it may not start with '-'"), "{e}");
}

#[test]
fn unknown_parameter_lists_allowed() {
    let e = err(&["max:1", "maximum:3"], &Mem::default());
    assert_eq!(
        e,
        "unknown parameter 'maximum' at @pparam=maximum:3 (allowed: max, max-min, max-max, stale, statfreq, id, file)"
    );
}

/// The table is the single source of the parameters' names: both
/// messages that list them list exactly its names, each is known, and
/// none is there twice.
#[test]
fn the_table_is_the_single_source_of_names() {
    assert_eq!(optspec::duplicates(&tables()), Vec::<&str>::new());
    let want: Vec<&str> = names(&tables()).collect();
    let e = err(&["max:1", "bogus:3"], &Mem::default());
    let listed = e
        .strip_prefix("unknown parameter 'bogus' at @pparam=bogus:3 (allowed: ")
        .and_then(|l| l.strip_suffix(')'))
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), want);
    let e = err(&["bogus"], &Mem::default());
    let listed = e
        .strip_prefix("expected name:value, got 'bogus' at @pparam=bogus (parameters: ")
        .and_then(|l| l.strip_suffix(')'))
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), want);
    for name in &want {
        let e = err(&[&format!("{name}:")], &Mem::default());
        assert_eq!(
            e,
            format!("parameter '{name}' has an empty value at @pparam={name}:")
        );
    }
}

/// The parameter table of docs/throttle.md lists exactly the table's names.
#[test]
fn the_docs_list_exactly_the_tables_names() {
    let md = include_str!("../../../../../docs/throttle.md");
    let documented = optspec::documented(md, "Parameters", "").expect("a Parameters section");
    let mut known: Vec<&str> = names(&tables()).collect();
    known.sort_unstable();
    assert_eq!(documented, known);
}

#[test]
fn default_ids() {
    assert_eq!(default_id("http://t.test/"), "t.test");
    assert_eq!(default_id("https://a.com:8080/x/y/"), "a.com_8080_x_y");
    assert_eq!(default_id("http:///"), "throttle");
    assert_eq!(default_id("http://-x.test/"), "_x.test");
    assert_eq!(default_id("-"), "_");
    assert!(validate_id(&default_id("http://a b\tc/")).is_ok());
}

/// ATS keeps ~1 KB of a diagnostic: a long value must not push the
/// parameter's name (or what is allowed) out of it.
#[test]
fn long_values_come_after_the_parameter_and_are_shortened() {
    let digits = "9".repeat(10240);
    let shown = "9".repeat(limits::quote::MAX_SHOWN_CHARS);
    let e = err(&[&format!("max:{digits}")], &Mem::default());
    assert_eq!(
        e,
        format!(
            "parameter 'max' has an invalid value '{shown}…' (10240 bytes) at \
             @pparam=max:{}… (10244 bytes): too large; expected auto or a whole number from 0 to \
             4294967295",
            &shown[4..]
        )
    );
    let spaced = format!("{} {}", "x", "y".repeat(10240));
    for name in ["max", "stale", "statfreq", "id", "file"] {
        for value in [&digits, &spaced] {
            let opt = format!("{name}:{value}");
            let Err(e) = run(&["max:1", &opt], &Mem::default()) else {
                panic!("{name} accepted");
            };
            assert!(
                e.starts_with(&format!("parameter '{name}' has an invalid value '")),
                "{e}"
            );
            // With ATS's own prefix, well under the ~1 KB it keeps.
            assert!(e.len() < 700, "{e}");
        }
    }
    // The same from a file: file and line instead of the @pparam.
    let mem = Mem::default().with("/etc/ts/big.config", &format!("max:{digits}\n"));
    let e = err(&["file:big.config"], &mem);
    assert!(
        e.starts_with(&format!(
            "parameter 'max' has an invalid value '{shown}…' (10240 bytes) at \
             /etc/ts/big.config:1 (from @pparam=file:big.config): too large"
        )),
        "{e}"
    );
    let e = err(&[&format!("{digits}:1")], &Mem::default());
    assert!(
        e.starts_with(&format!("unknown parameter '{shown}…' (10240 bytes) at")),
        "{e}"
    );
    assert!(e.len() < 400, "{e}");
}

/// A NUL or other control character would end (or break) the C string
/// ATS logs: the message shows it escaped and goes on past it.
#[test]
fn control_characters_are_escaped() {
    let mem = Mem::default().with("/etc/ts/nul.config", "max:1\nstale:1\0\n");
    assert_eq!(
        err(&["file:nul.config"], &mem),
        "parameter 'stale' has an invalid value '1\\0' at /etc/ts/nul.config:2 (from \
         @pparam=file:nul.config): not a whole number; expected a number of seconds from 0 \
         to 4294967295"
    );
    let e = err(&["max:1", "id:a\u{1b}b"], &Mem::default());
    assert!(
        e.starts_with("parameter 'id' has an invalid value 'a\\u{1b}b' at @pparam=id:a\\u{1b}b:"),
        "{e}"
    );
    let e = err(&["max:1", "file:a\u{1}b"], &Mem::default());
    assert!(e.contains("cannot read /etc/ts/a\\u{1}b:"), "{e}");
    let e = err(&["max:1", "file:a\\\u{7}"], &Mem::default());
    assert!(e.contains("unsupported escape '\\\\u{7}'"), "{e}");
    assert!(!e.chars().any(char::is_control), "{e:?}");
}
