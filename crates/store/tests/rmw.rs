//! Read, modify, compare-and-swap (crates/store's `rmw`) on a real
//! memcached and a real redis-server (one per test, loopback): the same
//! scenarios on both stores.

use std::time::{Duration, Instant};

use ats_tests::memcached::Memcached as McServer;
use ats_tests::redis::{DelayProxy, Redis as RedisServer};
use store::memcached::{server_of, Memcached};
use store::redis::Addr;
use store::redis_cas::RedisCas;
use store::rmw::{CasBackend, CasStore, Rmw, MAX_ROUNDS};

mod counter;
use counter::Add;
use store::{Answer, Client, Config};

/// A store server under test.
trait Server: Sized {
    type Store: CasStore;
    fn start() -> Self;
    fn port(&self) -> u16;
    fn stop(&mut self);
    fn restart(&mut self);
    /// The store for these servers' ports.
    fn store(ports: &[u16]) -> Self::Store;
    fn get(&self, key: &str) -> Option<String>;
    /// Stores a raw value (for foreign-value tests).
    fn put_raw(&self, key: &str, value: &str);
}

impl Server for McServer {
    type Store = Memcached;
    fn start() -> Self {
        McServer::start().expect("memcached")
    }
    fn port(&self) -> u16 {
        McServer::port(self)
    }
    fn stop(&mut self) {
        McServer::stop(self)
    }
    fn restart(&mut self) {
        McServer::restart(self).expect("restart")
    }
    fn store(ports: &[u16]) -> Memcached {
        Memcached::new(ports.iter().map(|p| format!("127.0.0.1:{p}")).collect())
    }
    fn get(&self, key: &str) -> Option<String> {
        McServer::get(self, key).expect("get")
    }
    fn put_raw(&self, key: &str, value: &str) {
        let a = self
            .command(&format!("set {key} 0 60 {}\r\n{value}", value.len()))
            .expect("set");
        assert!(a.starts_with("STORED"), "{a}");
    }
}

impl Server for RedisServer {
    type Store = RedisCas;
    fn start() -> Self {
        RedisServer::start().expect("redis-server")
    }
    fn port(&self) -> u16 {
        RedisServer::port(self)
    }
    fn stop(&mut self) {
        RedisServer::stop(self)
    }
    fn restart(&mut self) {
        RedisServer::restart(self).expect("restart")
    }
    fn store(ports: &[u16]) -> RedisCas {
        RedisCas::new(&Addr {
            host: "127.0.0.1".into(),
            port: ports[0],
            db: 0,
        })
        .expect("address")
    }
    fn get(&self, key: &str) -> Option<String> {
        let a = self.command(&["GET", key]).expect("GET");
        if a.starts_with("$-1") {
            return None;
        }
        a.split("\r\n").nth(1).map(str::to_owned)
    }
    fn put_raw(&self, key: &str, value: &str) {
        let a = self.command(&["SET", key, value]).expect("SET");
        assert!(a.starts_with("+OK"), "{a}");
    }
}

type C<S> = Client<CasBackend<<S as Server>::Store, Add>, u32>;

fn client<S: Server>(ports: &[u16]) -> C<S> {
    Client::start(
        "rmw-test",
        CasBackend::new(S::store(ports)),
        Config::default(),
    )
    .expect("thread")
}

const TIMEOUT: Duration = Duration::from_millis(500);

/// Submits one `Add` per entry of `by` on `key`; their outcomes in order.
fn add<S: Server>(c: &C<S>, key: &str, by: &[u64]) -> Vec<Answer<u64>> {
    for (i, &b) in by.iter().enumerate() {
        let op = Rmw {
            key: key.to_owned(),
            modify: Add { by: b },
        };
        if c.submit(op, i as u32, TIMEOUT).is_err() {
            panic!("no room");
        }
    }
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while out.len() < by.len() && Instant::now() < end {
        match c.try_complete() {
            Some(done) => out.push((done.token, done.answer)),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    assert_eq!(out.len(), by.len(), "completions");
    out.sort_by_key(|(t, _)| *t);
    out.into_iter().map(|(_, o)| o).collect()
}

fn adds_then_deletes<S: Server>() {
    let s = S::start();
    let c = client::<S>(&[s.port()]);
    assert_eq!(add::<S>(&c, "k1", &[5]), vec![Answer::Reply(5)]);
    assert_eq!(add::<S>(&c, "k1", &[2]), vec![Answer::Reply(7)]);
    assert_eq!(s.get("k1").as_deref(), Some("7"));
    assert_eq!(add::<S>(&c, "k1", &[0]), vec![Answer::Reply(0)]);
    assert_eq!(s.get("k1"), None);
    // Deleting what is not there is fine.
    assert_eq!(add::<S>(&c, "k1", &[0]), vec![Answer::Reply(0)]);
}

fn ops_on_one_key_in_one_batch_apply_in_order<S: Server>() {
    let s = S::start();
    let c = client::<S>(&[s.port()]);
    // Submitted together: most land in one batch, and each sees the last.
    let got = add::<S>(&c, "k", &[1; 50]);
    let values: Vec<u64> = got
        .iter()
        .map(|o| match o {
            Answer::Reply(v) => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(values, (1..=50).collect::<Vec<u64>>());
    assert_eq!(s.get("k").as_deref(), Some("50"));
}

/// Two proxies (two clients, two connections) adding to one key at once
/// lose no update: compare-and-swap makes the loser read again.
fn two_proxies_racing_on_one_key_lose_nothing<S: Server + Send + 'static>() {
    let s = S::start();
    let port = s.port();
    let run = move || {
        std::thread::spawn(move || {
            let c = client::<S>(&[port]);
            let mut ok = 0;
            for _ in 0..20 {
                ok += add::<S>(&c, "shared", &[1; 10])
                    .iter()
                    .filter(|o| matches!(o, Answer::Reply(_)))
                    .count();
            }
            ok
        })
    };
    let (a, b) = (run(), run());
    let ok = a.join().unwrap() + b.join().unwrap();
    let stored: usize = s.get("shared").expect("a value").parse().unwrap();
    assert_eq!(stored, ok, "every acknowledged update is in the store");
    assert!(ok >= 390, "few may give up after {MAX_ROUNDS} races: {ok}");
}

fn an_outage_fails_fast_and_service_returns_within_a_second<S: Server>() {
    let mut s = S::start();
    let c = client::<S>(&[s.port()]);
    assert_eq!(add::<S>(&c, "k", &[1]), vec![Answer::Reply(1)]);
    s.stop();
    for _ in 0..5 {
        let t = Instant::now();
        let got = add::<S>(&c, "k", &[1]);
        assert!(matches!(got[0], Answer::Error(_)), "{got:?}");
        assert!(t.elapsed() < TIMEOUT + Duration::from_millis(100));
    }
    s.restart();
    let back = Instant::now();
    loop {
        if add::<S>(&c, "k", &[1]) == vec![Answer::Reply(1)] {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "not back within 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_slow_server_times_out_by_the_deadline<S: Server>() {
    let s = S::start();
    let slow = DelayProxy::start(s.port(), Duration::from_millis(800)).unwrap();
    let c = client::<S>(&[slow.port()]);
    let t = Instant::now();
    assert_eq!(add::<S>(&c, "k", &[1]), vec![Answer::Timeout]);
    assert!(
        t.elapsed() < TIMEOUT + Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

fn a_foreign_oversized_value_breaks_the_batch_not_the_client<S: Server>() {
    let s = S::start();
    s.put_raw("big", &"x".repeat(store::memcached::MAX_VALUE + 1));
    let c = client::<S>(&[s.port()]);
    let got = add::<S>(&c, "big", &[1]);
    assert!(
        matches!(&got[0], Answer::Error(e) if e.contains("value")),
        "{got:?}"
    );
    // The client reconnects and serves other keys.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(add::<S>(&c, "small", &[1]), vec![Answer::Reply(1)]);
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod memcached {
            use super::*;
            $(#[test] fn $name() { super::$name::<McServer>() })*
        }
        mod redis {
            use super::*;
            $(#[test] fn $name() { super::$name::<RedisServer>() })*
        }
    };
}

on_both!(
    adds_then_deletes,
    ops_on_one_key_in_one_batch_apply_in_order,
    two_proxies_racing_on_one_key_lose_nothing,
    an_outage_fails_fast_and_service_returns_within_a_second,
    a_slow_server_times_out_by_the_deadline,
    a_foreign_oversized_value_breaks_the_batch_not_the_client,
);

/// A server that drips its answer a byte at a time cannot stretch a request
/// past its deadline: the deadline bounds the whole exchange, not each read.
#[test]
fn a_dripping_memcached_times_out_by_the_deadline() {
    let s = McServer::start().unwrap();
    // Seed a value so the read's answer is long (VALUE line, data, END).
    s.put_raw("k", &"7".repeat(200));
    let drip = DelayProxy::drip(s.port(), Duration::from_millis(10)).unwrap();
    let c = client::<McServer>(&[drip.port()]);
    let t = Instant::now();
    let got = add::<McServer>(&c, "k", &[1]);
    assert_eq!(got, vec![Answer::Timeout]);
    assert!(
        t.elapsed() < TIMEOUT + Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn memcached_keys_spread_over_servers_by_a_fixed_hash() {
    let (s1, s2) = (McServer::start().unwrap(), McServer::start().unwrap());
    let c = client::<McServer>(&[s1.port(), s2.port()]);
    let keys: Vec<String> = (0..40).map(|i| format!("ipt:x:10.0.0.{i}")).collect();
    for k in &keys {
        assert_eq!(add::<McServer>(&c, k, &[3]), vec![Answer::Reply(3)]);
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
fn invalid_memcached_keys_are_refused_without_a_round_trip() {
    let s = McServer::start().unwrap();
    let c = client::<McServer>(&[s.port()]);
    for bad in ["", "has space", &"k".repeat(251)] {
        let got = add::<McServer>(&c, bad, &[1]);
        assert!(
            matches!(&got[0], Answer::Error(e) if e.contains("invalid")),
            "{got:?}"
        );
    }
}

#[test]
fn redis_reloads_a_flushed_script_and_loses_no_update() {
    let s = <RedisServer as Server>::start();
    let c = client::<RedisServer>(&[s.port()]);
    assert_eq!(add::<RedisServer>(&c, "k", &[1]), vec![Answer::Reply(1)]);
    s.command(&["SCRIPT", "FLUSH"]).expect("flush");
    assert_eq!(add::<RedisServer>(&c, "k", &[1]), vec![Answer::Reply(2)]);
    assert_eq!(Server::get(&s, "k").as_deref(), Some("2"));
}
