use super::*;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("optspec-files-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

#[test]
fn fs_reads_text_and_canonical_identity() {
    let dir = tmp("ok");
    std::fs::write(dir.join("a b.conf"), "x = 1\n").expect("write");
    let via = dir.join("sub");
    std::fs::create_dir_all(&via).expect("sub");
    let got = FsFiles
        .read(&via.join("../a b.conf"), 100)
        .expect("readable");
    assert_eq!(got.text, "x = 1\n");
    assert_eq!(
        got.identity,
        std::fs::canonicalize(dir.join("a b.conf")).expect("canonical")
    );
    // Exactly the limit is fine.
    assert!(FsFiles.read(&dir.join("a b.conf"), 6).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fs_refuses_large_non_utf8_directories_and_missing() {
    let dir = tmp("bad");
    std::fs::write(dir.join("big"), vec![b'#'; 2000]).expect("write");
    std::fs::write(dir.join("latin1"), b"ab\xe9").expect("write");
    let e = FsFiles.read(&dir.join("big"), 1999).expect_err("too big");
    assert!(matches!(e, ReadError::TooLarge { limit: 1999 }), "{e:?}");
    assert_eq!(e.to_string(), "larger than 1999 bytes");
    let e = FsFiles.read(&dir.join("latin1"), 100).expect_err("latin1");
    assert!(matches!(e, ReadError::NotUtf8 { valid_up_to: 2 }), "{e:?}");
    assert_eq!(e.to_string(), "not UTF-8 text (byte 2)");
    assert_eq!(e.std_wording(), "stream did not contain valid UTF-8");
    let e = FsFiles.read(&dir, 100).expect_err("directory");
    assert!(matches!(e, ReadError::Directory), "{e:?}");
    assert_eq!(e.std_wording(), "Is a directory (os error 21)");
    let e = FsFiles.read(&dir.join("nope"), 100).expect_err("missing");
    assert_eq!(e.to_string(), "No such file or directory (os error 2)");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `std_wording` is what `read_to_string` said: checked against it.
/// A FIFO (or a device) named as a configuration file is refused at
/// once: opening one for reading would block until a writer came, and
/// with it traffic_server's start or reload.
#[test]
fn fs_refuses_a_fifo_at_once() {
    let dir = tmp("fifo");
    let fifo = dir.join("weights");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(FsFiles.read(&path, 100).map(|f| f.text));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the read blocked on the FIFO");
    let e = got.expect_err("a FIFO is refused");
    assert_eq!(e.to_string(), "not a regular file (a FIFO)");
    assert_eq!(e.std_wording(), "not a regular file (a FIFO)");
    let dev = read_bytes(Path::new("/dev/zero"), 100).expect_err("a device is refused");
    assert_eq!(dev.to_string(), "not a regular file (a character device)");
}

#[test]
fn std_wording_matches_read_to_string() {
    let dir = tmp("std");
    std::fs::write(dir.join("latin1"), b"ab\xe9").expect("write");
    for path in [dir.join("latin1"), dir.clone(), dir.join("nope")] {
        let std = std::fs::read_to_string(&path).expect_err("refused");
        let ours = FsFiles.read(&path, 100).expect_err("refused");
        assert_eq!(ours.std_wording(), std.to_string(), "{}", path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mem_behaves_as_the_file_system() {
    let dir = tmp("mem");
    std::fs::write(dir.join("big"), vec![b'#'; 20]).expect("write");
    std::fs::write(dir.join("latin1"), b"ab\xe9").expect("write");
    std::fs::write(dir.join("ok"), "fine").expect("write");
    let d = dir.display().to_string();
    let mem = MemFiles::new()
        .with(&format!("{d}/big"), &"#".repeat(20))
        .with_bytes(&format!("{d}/latin1"), b"ab\xe9")
        .with(&format!("{d}/ok"), "fine")
        .with_dir(&d);
    for name in ["big", "latin1", "ok", "", "nope"] {
        let path = if name.is_empty() {
            dir.clone()
        } else {
            dir.join(name)
        };
        let words = |r: Result<FileText, ReadError>| r.map(|t| t.text).map_err(|e| e.to_string());
        assert_eq!(
            words(FsFiles.read(&path, 10)),
            words(mem.read(&path, 10)),
            "{name}"
        );
    }
    assert_eq!(
        mem.read(&dir.join("ok"), 10).expect("ok").identity,
        dir.join("ok")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mem_of_pairs_and_insert() {
    let mut mem = MemFiles::of(&[("/a", "1"), ("/b", "2")]);
    assert_eq!(mem.read(Path::new("/b"), 1).expect("b").text, "2");
    mem.insert("/b", "22");
    assert!(matches!(
        mem.read(Path::new("/b"), 1),
        Err(ReadError::TooLarge { limit: 1 })
    ));
}
