//! `--config` files: the same options, comments, errors that name the file
//! and line, unreadable files (a list file's too).

use super::*;

#[test]
fn config_file_holds_the_same_options_and_pparams_after_it_override() {
    let files = MemFiles::of(&[(
        "/etc/ts/throttle.conf",
        "# Perlbal's example\ninitial-delay = 10\n--max-delay=60\n\nthreshold=3 # seconds\nmax-concurrent=2\n\
         ban-threshold=4\nban-expiration=180\npath-regex=^/webapp/\nmethod-regex=^GET$\nlog-events=ban,unban\nlog-only\n",
    )]);
    let o = Options::parse(
        &["--config=throttle.conf", "--max-delay=90"],
        Path::new("/etc/ts"),
        &files,
    )
    .unwrap();
    let p = o.params;
    assert_eq!(
        (p.initial_delay, p.max_delay, p.threshold),
        (10 * S, 90 * S, 3 * S)
    );
    assert_eq!((p.ban_threshold, p.ban_expiration), (4, 180 * S));
    assert!(o.log_only);
    assert_eq!(o.log_events.describe(), "ban,unban");
}

#[test]
fn a_hash_inside_a_value_is_not_a_comment() {
    let files = MemFiles::of(&[(
        "/etc/ts/t.conf",
        "# scope
path-regex = ^/a#b(#x)?$ # the anchor page
threshold=3 # seconds
	max-delay=9	# tab
",
    )]);
    let o = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap();
    let re = o.path_regex.as_ref().unwrap();
    assert_eq!(re.as_str(), "^/a#b(#x)?$");
    assert!(re.is_match(b"/a#b") && re.is_match(b"/a#b#x") && !re.is_match(b"/a"));
    assert_eq!((o.params.threshold, o.params.max_delay), (3 * S, 9 * S));
    assert_eq!(crate::options::strip_comment("#all"), "");
    assert_eq!(crate::options::strip_comment("a=1#2"), "a=1#2");
}

#[test]
fn config_file_errors_name_file_and_line() {
    let files = MemFiles::of(&[("/etc/ts/t.conf", "initial-delay=1\n\nmax-delay=soon\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e,
        "--max-delay has an invalid value 'soon' (at /etc/ts/t.conf:3): allowed a number of \
         seconds from more than 0 to 86400, fractions allowed (e.g. 3 or 0.5)"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "bogus=1\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with("unknown option 'bogus=1' (at /etc/ts/t.conf:1)"),
        "{e}"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "config=x\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e,
        "--config cannot be used inside a config file (at /etc/ts/t.conf:1)"
    );
    let e = Options::parse(&["--config=missing.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with("--config cannot read /etc/ts/missing.conf: No such file"),
        "{e}"
    );
}

/// The bounded reader's refusals keep ip_throttle's wording, for a
/// `--config` and a list file alike.
#[test]
fn unreadable_files_are_named_with_why() {
    let files = MemFiles::new()
        .with(
            "/etc/ts/big.conf",
            &"#".repeat(crate::options::MAX_CONFIG_BYTES as usize + 1),
        )
        .with_bytes("/etc/ts/latin1.conf", b"keys=1\n\xe9")
        .with_dir("/etc/ts/d");
    let e = |arg: &str| Options::parse(&[arg], Path::new("/etc/ts"), &files).unwrap_err();
    assert_eq!(
        e("--config=big.conf"),
        "--config cannot read /etc/ts/big.conf: larger than 1048576 bytes"
    );
    assert_eq!(
        e("--config=latin1.conf"),
        "--config cannot read /etc/ts/latin1.conf: not UTF-8 text (byte 7)"
    );
    assert_eq!(
        e("--config=d"),
        "--config cannot read /etc/ts/d: Is a directory (os error 21)"
    );
    let list = |p: &str| crate::lists::load(Path::new(p), &files).unwrap_err();
    assert_eq!(
        list("/etc/ts/latin1.conf"),
        "cannot read /etc/ts/latin1.conf: not UTF-8 text (byte 7)"
    );
    assert_eq!(
        list("/etc/ts/d"),
        "cannot read /etc/ts/d: Is a directory (os error 21)"
    );
    assert_eq!(
        list("/etc/ts/nope"),
        "cannot read /etc/ts/nope: No such file or directory (os error 2)"
    );
}
