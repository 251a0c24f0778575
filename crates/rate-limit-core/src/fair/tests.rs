use super::*;
use crate::Options;

const URL: &str = "http://cdn.example.com/";

fn parse(args: &[&str]) -> Result<Options, OptionError> {
    Options::parse(URL, args)
}

fn err(args: &[&str]) -> String {
    parse(args).expect_err("must be rejected").0
}

#[test]
fn fair_options_parse_with_their_defaults() {
    let o = parse(&["--limit=10", "--fair=header:X-User"]).unwrap();
    let f = o.fair.as_ref().unwrap();
    assert_eq!(
        (f.flow_slots, f.over, f.strict, f.weights_file.as_deref()),
        (None, Over::Wait, false, None)
    );
    assert_eq!(f.describe_source(), "header:X-User");
    let o = parse(&[
        "--limit=10",
        "--fair=session",
        "--flow-slots=3",
        "--flow-over=reject",
        "--strict",
    ])
    .unwrap();
    let f = o.fair.unwrap();
    assert_eq!(f.source, FlowSource::Session);
    assert_eq!(
        (f.flow_slots, f.over, f.strict),
        (Some(3), Over::Reject, true)
    );
    assert!(
        parse(&["--fair=ip"]).unwrap().fair.is_some(),
        "default --limit=100"
    );
    assert!(parse(&["--limit=1"]).unwrap().fair.is_none());
}

#[test]
fn fair_errors_name_the_option_and_what_is_allowed() {
    assert!(err(&["--fair=ip,header:X"]).starts_with(
        "--fair has an invalid value 'ip,header:X': allowed one of session, ip, header:NAME"
    ));
    assert!(err(&["--fair=user"]).starts_with("--fair has an invalid value 'user'"));
    assert_eq!(
        err(&["--limit=4", "--fair=ip", "--flow-slots=5"]),
        "--flow-slots has an invalid value '5': allowed an integer from 1 to the --limit (4)"
    );
    assert!(err(&["--fair=ip", "--flow-over=drop"])
        .starts_with("--flow-over has an invalid value 'drop': allowed reject or wait"));
    for opt in [
        "--flow-slots=2",
        "--flow-over=reject",
        "--strict",
        "--flow-weights=w.txt",
    ] {
        assert!(err(&[opt]).contains("needs --fair"), "{opt}");
    }
    assert!(err(&["--rate=5", "--fair=ip"]).starts_with("--fair needs --limit"));
    assert!(err(&["--fair=ip", "--key=ip"]).starts_with("--fair cannot be combined with --key"));
    assert!(err(&["--fair=ip", "--conntrack"])
        .starts_with("--fair cannot be combined with --conntrack"));
    assert!(
        err(&["--fair=session", "--flow-weights=w"]).starts_with("--flow-weights needs --fair=ip")
    );
}

#[test]
fn fair_options_belong_to_the_limiter_and_change_live() {
    let a = parse(&["--limit=4", "--fair=ip"]).unwrap();
    let b = parse(&["--limit=4", "--fair=ip", "--strict"]).unwrap();
    let names: Vec<_> = a.limiter_options().into_iter().map(|(n, _)| n).collect();
    for n in OPTIONS.iter().map(|o| &o.name) {
        assert!(names.contains(n), "{n}");
    }
    assert_ne!(a.limiter_options(), b.limiter_options());
    assert!(a
        .describe()
        .contains(" fair=ip flow-slots=fair-share flow-over=wait strict=false"));
}

fn spec(source: &str) -> FlowSource {
    parse(&["--limit=5", &format!("--fair={source}")])
        .unwrap()
        .fair
        .unwrap()
        .source
}

#[test]
fn weights_file_lines_and_errors_with_file_and_line() {
    let text = "# users\nalice slots=3\n\nbob weight=2 slots=1  # comment\n";
    let w = parse_weights(text, "w.txt", &spec("header:X-User")).unwrap();
    assert_eq!(w.entries.len(), 2);
    assert_eq!(
        w.entries[0].1,
        FlowWeight {
            slots: Some(3),
            weight: 1
        }
    );
    assert_eq!(
        w.entries[1].1,
        FlowWeight {
            slots: Some(1),
            weight: 2
        }
    );
    // Same bytes as a request's key.
    let mut k = Vec::new();
    assert!(matches!(spec("header:X-User"), FlowSource::Key(s) if s.value_key("alice", &mut k)));
    assert_eq!(w.entries[0].0, k);
    let e = |t: &str, src: &str| parse_weights(t, "w.txt", &spec(src)).unwrap_err().0;
    assert_eq!(
        e("alice slots=3\nbob slots=x\n", "header:X-User"),
        "--flow-weights 'w.txt':2: 'slots=x' is not slots=N (1 to 4294967295) or weight=W (1 to 1000)"
    );
    assert_eq!(
        e("alice\n", "header:X-User"),
        "--flow-weights 'w.txt':1: 'alice' needs slots=N and/or weight=W"
    );
    assert_eq!(
        e("a slots=1\na weight=2\n", "cookie:u"),
        "--flow-weights 'w.txt':2: 'a' is listed twice"
    );
    assert_eq!(
        e("\n\nhost slots=1\n", "ip"),
        "--flow-weights 'w.txt':3: 'host' is not an IP address (--fair=ip)"
    );
    assert!(e("a weight=1001\n", "query:u").contains("'weight=1001' is not"));
    assert!(e("a slots=0\n", "query:u").contains("'slots=0' is not"));
    let ips = parse_weights(
        "10.0.0.1 slots=2\n::ffff:10.0.0.2 weight=3\n",
        "w",
        &spec("ip"),
    )
    .unwrap();
    assert_eq!(ips.entries.len(), 2);
}

#[test]
fn weights_load_from_the_config_dir_and_change_the_fingerprint() {
    let dir = std::env::temp_dir().join(format!("fair-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("w.txt"), "alice slots=2\n").unwrap();
    let mut o = parse(&["--limit=4", "--fair=header:X-User", "--flow-weights=w.txt"])
        .unwrap()
        .fair
        .unwrap();
    load_weights(&mut o, &dir).unwrap();
    let first = o.describe_weights();
    assert!(first.starts_with("w.txt (1 entries, "), "{first}");
    std::fs::write(dir.join("w.txt"), "alice slots=3\n").unwrap();
    load_weights(&mut o, &dir).unwrap();
    assert_ne!(o.describe_weights(), first, "an edited file is a change");
    std::fs::remove_file(dir.join("w.txt")).unwrap();
    assert!(load_weights(&mut o, &dir)
        .unwrap_err()
        .0
        .starts_with("--flow-weights cannot read '"));
    let _ = std::fs::remove_dir(&dir);
}

/// The weights file is read bounded: a huge (or endless) one is refused
/// naming the option, the file and the limit, as an unreadable one is.
#[test]
fn an_oversized_weights_file_is_refused() {
    let dir = std::env::temp_dir().join(format!("fair-weights-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = std::fs::File::create(dir.join("w.txt")).unwrap();
    big.set_len(super::MAX_WEIGHTS_BYTES + 1).unwrap();
    let mut o = parse(&["--limit=4", "--fair=header:X-User", "--flow-weights=w.txt"])
        .unwrap()
        .fair
        .unwrap();
    let e = load_weights(&mut o, &dir).unwrap_err().0;
    assert_eq!(
        e,
        format!(
            "--flow-weights cannot read '{}': larger than 16777216 bytes",
            dir.join("w.txt").display()
        )
    );
    // A directory and text not UTF-8 keep the wording std gave them.
    std::fs::remove_file(dir.join("w.txt")).unwrap();
    std::fs::create_dir_all(dir.join("w.txt")).unwrap();
    let e = load_weights(&mut o, &dir).unwrap_err().0;
    assert!(e.ends_with(": Is a directory (os error 21)"), "{e}");
    std::fs::remove_dir(dir.join("w.txt")).unwrap();
    std::fs::write(dir.join("w.txt"), b"\xe9 slots=1\n").unwrap();
    let e = load_weights(&mut o, &dir).unwrap_err().0;
    assert!(e.ends_with(": stream did not contain valid UTF-8"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
