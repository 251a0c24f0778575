//! `file:` includes: lines and comments, relative paths, escapes, cycles,
//! bounds, and errors naming the file and line.

use super::*;

#[test]
fn file_lines_comments_and_relative_paths() {
    let mem = Mem::default()
        .with(
            "/etc/ts/example 01 throttle.config",
            "# comment\n\nid:example-01\n  max:2000\nstale:3600\r\nstatfreq:10000\n",
        )
        .with("/abs/t.config", "max:9\n");
    let p = run(&[r"file:example\ 01\ throttle.config"], &mem).expect("valid");
    assert_eq!(p.max, 2000);
    assert_eq!(p.id.as_deref(), Some("example-01"));
    assert_eq!(p.statfreq_ms, 10000);
    let p = run(&["\"file:example\\ 01\\ throttle.config\""], &mem).expect("quoted");
    assert_eq!(p.max, 2000);
    assert_eq!(run(&["file:/abs/t.config"], &mem).expect("abs").max, 9);
}

#[test]
fn errors_in_files_name_file_and_line() {
    let mem = Mem::default()
        .with("/etc/ts/a.config", "max:1\n\nstale:soon\n")
        .with("/etc/ts/outer.config", "id:x\nfile:a.config\n");
    let e = err(&["file:outer.config"], &mem);
    assert_eq!(
        e,
        "parameter 'stale' has an invalid value 'soon' at /etc/ts/a.config:3 (included from \
         /etc/ts/outer.config:2 (from @pparam=file:outer.config)): not a whole number; \
         expected a number of seconds from 0 to 4294967295"
    );
    let mem = Mem::default().with("/etc/ts/u.config", "max:1\nbogus:2\n");
    let e = err(&["file:u.config"], &mem);
    assert!(
        e.contains("unknown parameter 'bogus' at /etc/ts/u.config:2"),
        "{e}"
    );
}

#[test]
fn unreadable_file() {
    let e = err(&["max:1", "file:nope.config"], &Mem::default());
    assert!(
        e.starts_with("parameter 'file' has an invalid value 'nope.config' at @pparam=file:nope.config: cannot read /etc/ts/nope.config: No such file"),
        "{e}"
    );
}

/// The bounded reader's refusals keep throttle's wording.
#[test]
fn refused_files_say_why() {
    let mem = Mem::default()
        .with_bytes("/etc/ts/latin1", b"max:1\n\xe9")
        .with_dir("/etc/ts/d");
    assert_eq!(
        err(&["max:1", "file:latin1"], &mem),
        "parameter 'file' has an invalid value 'latin1' at @pparam=file:latin1: cannot read \
         /etc/ts/latin1: it is not UTF-8 text"
    );
    assert_eq!(
        err(&["max:1", "file:d"], &mem),
        "parameter 'file' has an invalid value 'd' at @pparam=file:d: cannot read /etc/ts/d: \
         it is a directory"
    );
}

#[test]
fn split_escape_gets_a_hint() {
    let e = err(&["max:1", r"file:example\"], &Mem::default());
    assert!(
        e.contains("ends with a lone '\\'") && e.contains("quote"),
        "{e}"
    );
    let e = err(&["max:1", r"file:a\tb"], &Mem::default());
    assert!(e.contains("unsupported escape '\\t'"), "{e}");
}

#[test]
fn self_inclusion_is_refused() {
    let mem = Mem::default()
        .with("/etc/ts/a.config", "max:1\nfile:b.config\n")
        .with("/etc/ts/b.config", "file:a.config\n");
    let e = err(&["file:a.config"], &mem);
    assert!(
        e.contains("includes itself (/etc/ts/a.config -> /etc/ts/b.config -> /etc/ts/a.config)"),
        "{e}"
    );
    let mem = Mem::default().with("/etc/ts/s.config", "file:s.config\n");
    assert!(err(&["file:s.config"], &mem).contains("includes itself"));
}

#[test]
fn repeated_non_cyclic_includes_are_fine() {
    let mem = Mem::default()
        .with("/etc/ts/common", "stale:4\n")
        .with("/etc/ts/a", "file:common\nfile:common\nmax:2\n");
    assert_eq!(run(&["file:a", "file:common"], &mem).expect("ok").stale, 4);
}

#[test]
fn depth_and_count_are_bounded() {
    let mut mem = Mem::default();
    for i in 0..=MAX_INCLUDE_DEPTH {
        mem = mem.with(&format!("/etc/ts/f{i}"), &format!("file:f{}\n", i + 1));
    }
    mem = mem.with(&format!("/etc/ts/f{}", MAX_INCLUDE_DEPTH + 1), "max:1\n");
    assert!(err(&["file:f0"], &mem).contains("levels deep"));

    // A doubling include graph: each level includes the next twice.
    let mut mem = Mem::default();
    for i in 0..7 {
        mem = mem.with(
            &format!("/etc/ts/d{i}"),
            &format!("file:d{0}\nfile:d{0}\n", i + 1),
        );
    }
    mem = mem.with("/etc/ts/d7", "max:1\n");
    assert!(err(&["file:d0"], &mem).contains("more than 64 files"));
}

#[test]
fn oversized_file() {
    let big = "#".repeat(MAX_FILE_BYTES as usize + 1);
    let mem = Mem::default().with("/etc/ts/big", &big);
    assert!(err(&["max:1", "file:big"], &mem).contains("larger than 1048576 bytes"));
}

#[test]
fn fs_source_reads_and_bounds() {
    let dir = std::env::temp_dir().join(format!("throttle-core-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::write(dir.join("with space.config"), "max:4\n").expect("write");
    std::fs::write(dir.join("big"), vec![b'#'; 2000]).expect("write");
    let p = parse(&[r"file:with\ space.config"], &dir, &FsFiles).expect("ok");
    assert_eq!(p.max, 4);
    let e = unreadable(FsFiles.read(&dir.join("big"), 1000).expect_err("too big"));
    assert!(e.contains("larger than 1000"), "{e}");
    assert!(unreadable(FsFiles.read(&dir, 1000).expect_err("dir")).contains("directory"));
    let _ = std::fs::remove_dir_all(&dir);
}
