//! Protocol conformance of the real daemon: exact answers, pipelining,
//! concurrency, over-long lines, Unix socket, hostile clients.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{pattern, Client, Daemon};

/// Burst 3, and a rate so slow that nothing refills during a test.
const SLOW: &str = "burst = 3\nrate = 0.001\n";

#[test]
fn answers_are_exact_and_pipelined_in_order() {
    let d = Daemon::start("pipelining", &format!("{SLOW}max_line = 16\n"));
    let mut c = d.connect();
    // One write, five answers, in order.
    c.send(b"a\na\na\na\nb\n");
    assert_eq!(c.answers(5), "OK\nOK\nOK\nNO\nOK\n");
    // A line split over writes is one request.
    c.send(b"c");
    std::thread::sleep(Duration::from_millis(20));
    c.send(b"\n");
    assert_eq!(c.answers(1), "OK\n");
    // CRLF is the same tag as LF.
    c.send(b"d\r\nd\nd\nd\r\n");
    assert_eq!(c.answers(4), pattern(3, 1));
    // An empty line is refused.
    c.send(b"\n");
    assert_eq!(c.answers(1), "NO\n");
    // max_line bytes is fine; one more is refused, and the next line is normal.
    c.send(b"0123456789abcdef\n0123456789abcdefX\ne\n");
    assert_eq!(c.answers(3), "OK\nNO\nOK\n");
    // An over-long line arriving in pieces is one refused line.
    for _ in 0..10 {
        c.send(b"0123456789");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.send(b"\nf\n");
    assert_eq!(c.answers(2), "NO\nOK\n");
    // A deep pipeline in one write.
    let many: String = (0..5000).map(|i| format!("p{}\n", i % 1000)).collect();
    c.send(many.as_bytes());
    let got = c.answers(5000);
    // Tags p0..p999, five times each: OK three times, then NO.
    let expect: String = (0..5)
        .flat_map(|round| (0..1000).map(move |_| if round < 3 { "OK\n" } else { "NO\n" }))
        .collect();
    assert_eq!(got, expect);
}

#[test]
fn many_concurrent_clients_share_buckets_exactly() {
    let d = Daemon::start("concurrency", SLOW);
    let addr = d.tcp;
    let handles: Vec<_> = (0..20)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = Client::tcp(addr);
                // Its own tag: exactly burst admitted.
                let own = format!("client-{i}\n").repeat(5);
                c.send(own.as_bytes());
                assert_eq!(c.answers(5), pattern(3, 2), "client {i}");
                // A tag shared by all 20: counted below.
                c.send(b"shared\n".repeat(10).as_slice());
                c.answers(10).matches("OK\n").count()
            })
        })
        .collect();
    let ok: usize = handles
        .into_iter()
        .map(|h| h.join().unwrap_or(usize::MAX))
        .sum();
    assert_eq!(
        ok, 3,
        "20 clients together got exactly the burst of the shared tag"
    );
}

#[test]
fn unix_socket() {
    let dir = common::temp_dir("unix-path");
    let path = dir.join("d.sock");
    let d = Daemon::start(
        "unix",
        &format!("{SLOW}listen_unix = {}\nunix_mode = 600\n", path.display()),
    );
    let mut c = Client::unix(&path);
    c.send(b"u\nu\nu\nu\n");
    assert_eq!(c.answers(4), pattern(3, 1));
    // TCP and Unix clients share the buckets.
    assert!(!d.connect().ask("u"));
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that writes without reading, and one that sends endless garbage
/// without newlines, cannot slow down a well-behaved client.
#[test]
fn hostile_clients_do_not_affect_others() {
    let d = Daemon::start("hostile", &format!("{SLOW}write_timeout_ms = 500\n"));
    let mut hog = TcpStream::connect(d.tcp).unwrap_or_else(|e| panic!("{e}"));
    hog.set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap_or_else(|e| panic!("{e}"));
    let hog_thread = std::thread::spawn(move || {
        let chunk = b"hog\n".repeat(16 * 1024);
        let start = Instant::now();
        // Writes until the daemon stops reading (its answers fill our
        // receive buffer and its send buffer) or closes us.
        while start.elapsed() < Duration::from_secs(4) && hog.write_all(&chunk).is_ok() {}
    });
    let mut garbage = TcpStream::connect(d.tcp).unwrap_or_else(|e| panic!("{e}"));
    let g_thread = std::thread::spawn(move || {
        let junk = vec![0xA5u8; 64 * 1024];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) && garbage.write_all(&junk).is_ok() {}
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut good = d.connect();
    for i in 0..200 {
        let t = Instant::now();
        good.ask(&format!("good-{i}"));
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "answer {i} took {:?}",
            t.elapsed()
        );
    }
    let _ = hog_thread.join();
    let _ = g_thread.join();
    // Still serving after the hostile clients gave up.
    assert!(d.connect().ask("after"));
}

#[test]
fn connections_over_max_are_closed() {
    let d = Daemon::start("maxconn", &format!("{SLOW}max_connections = 2\n"));
    let mut a = d.connect();
    let mut b = d.connect();
    assert!(a.ask("x") && b.ask("y"));
    let mut c = d.connect();
    assert!(c.closed(), "a third connection is closed at once");
    drop(a);
    // The place is given back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.connect().try_ask("z").is_none() {
        assert!(
            Instant::now() < deadline,
            "the freed place was not given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(b.ask("y"));
}

/// `max_connections` silent clients do not lock others out: a new client
/// closes the longest-silent one that never sent a line (silent for over a
/// second) and is served.
#[test]
fn silent_connections_make_room_for_new_clients() {
    let d = Daemon::start("evict", &format!("{SLOW}max_connections = 2\n"));
    let mut silent: Vec<_> = (0..2).map(|_| d.connect()).collect();
    std::thread::sleep(Duration::from_millis(1300));
    let mut newcomer = d.connect();
    assert_eq!(
        newcomer.try_ask("n"),
        Some(true),
        "the new client is served"
    );
    let closed = silent.iter_mut().map(|c| c.eof()).filter(|&e| e).count();
    assert_eq!(closed, 1, "exactly one silent connection made room");
}

/// A flood of new connections cannot churn out clients that asked: a
/// connection that sent lines is closed for a newcomer only after
/// `max(idle_timeout / 10, 30 s)` of silence, far beyond this test.
#[test]
fn clients_that_asked_are_not_evicted_by_newcomers() {
    let d = Daemon::start("noevict", &format!("{SLOW}max_connections = 2\n"));
    let mut a = d.connect();
    let mut b = d.connect();
    assert!(a.ask("x") && b.ask("y"));
    std::thread::sleep(Duration::from_millis(1300));
    for _ in 0..3 {
        let mut c = d.connect();
        assert!(c.closed(), "the newcomer is closed, not an older client");
    }
    assert!(a.ask("x") && b.ask("y"), "both clients are still served");
}

/// One descriptor per connection (not two: the closer shares the stream),
/// so `max_connections` fit under RLIMIT_NOFILE.
#[test]
fn a_connection_costs_one_descriptor() {
    let d = Daemon::start("fds", SLOW);
    let mut first = d.connect();
    assert!(first.ask("w"));
    let before = d.open_descriptors();
    let mut clients: Vec<_> = (0..10).map(|_| d.connect()).collect();
    for c in &mut clients {
        assert!(c.try_ask("v").is_some());
    }
    assert_eq!(d.open_descriptors(), before + 10);
}

/// The idle timeout closes a silent client, giving its place back.
#[test]
fn a_silent_client_is_closed_after_the_idle_timeout() {
    let d = Daemon::start("idle", &format!("{SLOW}idle_timeout_ms = 300\n"));
    let mut c = d.connect();
    assert!(c.ask("x"));
    let t = Instant::now();
    assert!(c.eof(), "closed after the idle timeout");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "closed after {:?}",
        t.elapsed()
    );
}
