//! The memcached backend (read, modify, compare-and-swap) against a real
//! memcached (one per test, on a loopback port).

use std::time::{Duration, Instant};

use ats_tests::memcached::Memcached as Server;
use ats_tests::redis::DelayProxy;
use store::memcached::{server_of, Memcached};
use store::rmw::{CasBackend, Modify, Put, Rmw};
use store::{Client, Config, Outcome};

/// Adds `by` to a decimal counter (absent = 0) and returns the new value;
/// `by == 0` deletes it.
struct Add {
    by: u64,
}

impl Modify for Add {
    type Out = u64;
    fn apply(&self, current: Option<&[u8]>) -> (u64, Put) {
        let now: u64 = current
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        if self.by == 0 {
            return (0, Put::Delete);
        }
        let next = now + self.by;
        (
            next,
            Put::Set {
                value: next.to_string().into_bytes(),
                ttl_secs: 60,
            },
        )
    }
}

type C = Client<CasBackend<Memcached, Add>, u32>;

fn client(servers: Vec<String>) -> C {
    Client::start(
        "mc-test",
        CasBackend::new(Memcached::new(servers)),
        Config::default(),
    )
    .expect("thread")
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

const TIMEOUT: Duration = Duration::from_millis(500);

/// Waits for `n` completions (at most 5 s), in token order.
fn collect(c: &C, n: usize) -> Vec<(u32, Outcome<u64>, Duration)> {
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while out.len() < n && Instant::now() < end {
        match c.try_complete() {
            Some(done) => out.push((done.token, done.outcome, done.submitted.elapsed())),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    assert_eq!(out.len(), n, "completions");
    out.sort_by_key(|(t, _, _)| *t);
    out
}

fn add(c: &C, key: &str, by: &[u64]) -> Vec<Outcome<u64>> {
    for (i, &b) in by.iter().enumerate() {
        let op = Rmw {
            key: key.to_owned(),
            modify: Add { by: b },
        };
        if c.submit(op, i as u32, TIMEOUT).is_err() {
            panic!("no room");
        }
    }
    collect(c, by.len())
        .into_iter()
        .map(|(_, o, _)| o)
        .collect()
}

#[test]
fn read_modify_write_adds_then_deletes() {
    let s = Server::start().unwrap();
    let c = client(vec![addr(s.port())]);
    assert_eq!(add(&c, "k1", &[5]), vec![Outcome::Reply(5)]);
    assert_eq!(add(&c, "k1", &[2]), vec![Outcome::Reply(7)]);
    assert_eq!(s.get("k1").unwrap().as_deref(), Some("7"));
    assert_eq!(add(&c, "k1", &[0]), vec![Outcome::Reply(0)]);
    assert_eq!(s.get("k1").unwrap(), None);
    // Deleting what is not there is fine.
    assert_eq!(add(&c, "k1", &[0]), vec![Outcome::Reply(0)]);
}

#[test]
fn ops_on_one_key_in_one_batch_apply_in_order() {
    let s = Server::start().unwrap();
    let c = client(vec![addr(s.port())]);
    // Submitted together: most land in one batch, and each sees the last.
    let got = add(&c, "k", &[1; 50]);
    let values: Vec<u64> = got
        .iter()
        .map(|o| match o {
            Outcome::Reply(v) => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(values, (1..=50).collect::<Vec<u64>>());
    assert_eq!(s.get("k").unwrap().as_deref(), Some("50"));
}

/// Two proxies (two clients, two connections) adding to one key at once
/// lose no update: compare-and-swap makes the loser read again.
#[test]
fn two_proxies_racing_on_one_key_lose_nothing() {
    let s = Server::start().unwrap();
    let servers = vec![addr(s.port())];
    let run = |servers: Vec<String>| {
        std::thread::spawn(move || {
            let c = client(servers);
            let mut ok = 0;
            for round in 0..20 {
                let got = add(&c, "shared", &[1; 10]);
                ok += got
                    .iter()
                    .filter(|o| matches!(o, Outcome::Reply(_)))
                    .count();
                assert!(round < 20);
            }
            ok
        })
    };
    let (a, b) = (run(servers.clone()), run(servers));
    let ok = a.join().unwrap() + b.join().unwrap();
    let stored: usize = s.get("shared").unwrap().unwrap().parse().unwrap();
    assert_eq!(stored, ok, "every acknowledged update is in the store");
    assert!(
        ok >= 390,
        "few may give up after {} races: {ok}",
        store::rmw::MAX_ROUNDS
    );
}

#[test]
fn keys_spread_over_servers_by_a_fixed_hash() {
    let (s1, s2) = (Server::start().unwrap(), Server::start().unwrap());
    let servers = vec![addr(s1.port()), addr(s2.port())];
    let c = client(servers.clone());
    let keys: Vec<String> = (0..40).map(|i| format!("ipt:x:10.0.0.{i}")).collect();
    for k in &keys {
        assert_eq!(add(&c, k, &[3]), vec![Outcome::Reply(3)]);
    }
    let mut on = [0, 0];
    for k in &keys {
        let i = server_of(k, 2);
        on[i] += 1;
        let (here, there) = if i == 0 { (&s1, &s2) } else { (&s2, &s1) };
        assert_eq!(here.get(k).unwrap().as_deref(), Some("3"), "{k}");
        assert_eq!(there.get(k).unwrap(), None, "{k}");
    }
    assert!(on[0] > 5 && on[1] > 5, "{on:?}");
}

#[test]
fn an_outage_fails_fast_and_service_returns_within_a_second() {
    let mut s = Server::start().unwrap();
    let c = client(vec![addr(s.port())]);
    assert_eq!(add(&c, "k", &[1]), vec![Outcome::Reply(1)]);
    s.stop();
    for _ in 0..5 {
        let t = Instant::now();
        let got = add(&c, "k", &[1]);
        assert!(matches!(got[0], Outcome::Error(_)), "{got:?}");
        assert!(t.elapsed() < TIMEOUT + Duration::from_millis(100));
    }
    s.restart().unwrap();
    let back = Instant::now();
    loop {
        if add(&c, "k", &[1]) == vec![Outcome::Reply(1)] {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "not back within 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_slow_server_times_out_by_the_deadline() {
    let s = Server::start().unwrap();
    let slow = DelayProxy::start(s.port(), Duration::from_millis(800)).unwrap();
    let c = client(vec![addr(slow.port())]);
    let t = Instant::now();
    let got = add(&c, "k", &[1]);
    assert_eq!(got, vec![Outcome::Timeout]);
    assert!(
        t.elapsed() < TIMEOUT + Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_foreign_oversized_value_breaks_the_batch_not_the_client() {
    let s = Server::start().unwrap();
    let big = "x".repeat(store::memcached::MAX_VALUE + 1);
    let stored = s
        .command(&format!("set big 0 60 {}\r\n{big}", big.len()))
        .unwrap();
    assert!(stored.starts_with("STORED"), "{stored}");
    let c = client(vec![addr(s.port())]);
    let got = add(&c, "big", &[1]);
    assert!(
        matches!(&got[0], Outcome::Error(e) if e.contains("value")),
        "{got:?}"
    );
    // The client reconnects and serves other keys.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(add(&c, "small", &[1]), vec![Outcome::Reply(1)]);
}

#[test]
fn invalid_keys_are_refused_without_a_round_trip() {
    let s = Server::start().unwrap();
    let c = client(vec![addr(s.port())]);
    for bad in ["", "has space", &"k".repeat(251)] {
        let got = add(&c, bad, &[1]);
        assert!(
            matches!(&got[0], Outcome::Error(e) if e.contains("invalid")),
            "{got:?}"
        );
    }
}
