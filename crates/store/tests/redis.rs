//! The Redis backend and the client machinery against a real redis-server
//! (one per test, on a loopback port).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use ats_tests::redis::{DelayProxy, Redis as Server};
use store::redis::{key_base, Addr, Decide, LeaseIds, Op, Redis, Reply};
use store::{Answer, Client, Config, SubmitError};

type C = Client<Redis, u32>;

fn client(port: u16) -> C {
    let addr = Addr {
        host: "127.0.0.1".into(),
        port,
        db: 0,
    };
    let backend = Redis::new(&addr).expect("valid address");
    Client::start("store-test", backend, Config::default()).expect("thread")
}

const TIMEOUT: Duration = Duration::from_millis(500);

/// Waits for `n` completions (at most 5 s).
fn collect(c: &C, n: usize) -> Vec<(u32, Answer<Reply>, Duration)> {
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while out.len() < n && Instant::now() < end {
        match c.try_complete() {
            Some(done) => out.push((done.token, done.answer, done.submitted.elapsed())),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    assert_eq!(out.len(), n, "completions");
    out.sort_by_key(|(t, _, _)| *t);
    out
}

fn decide(base: &str, rate: Option<(f64, u32)>, limit: u32, member: String, ttl_ms: u64) -> Op {
    Op::Decide(Decide {
        base: base.to_owned(),
        interval_us: rate.map_or(0, |(r, _)| (1e6 / r) as u64),
        burst: rate.map_or(0, |(_, b)| b),
        limit,
        member,
        lease_ttl_ms: ttl_ms,
        check_only: false,
        block_us: 0,
    })
}

fn ask(c: &C, ops: Vec<Op>) -> Vec<Answer<Reply>> {
    let n = ops.len();
    for (i, op) in ops.into_iter().enumerate() {
        c.submit(op, i as u32, TIMEOUT).expect("room");
    }
    collect(c, n).into_iter().map(|(_, o, _)| o).collect()
}

fn admitted(o: &Answer<Reply>) -> bool {
    matches!(o, Answer::Reply(Reply::Admitted { .. }))
}

#[test]
fn gcra_admits_the_burst_then_the_rate() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let base = key_base("t", None);
    let ids = LeaseIds::default();
    // 10/s, burst 5: five at once, then one every 100 ms.
    let ops = (0..8)
        .map(|_| decide(&base, Some((10.0, 5)), 0, ids.next(), 1000))
        .collect();
    let got = ask(&c, ops);
    assert_eq!(got.iter().filter(|o| admitted(o)).count(), 5, "{got:?}");
    let Answer::Reply(Reply::TooSoon { retry_after }) = &got[7] else {
        panic!("{got:?}");
    };
    assert!(
        *retry_after <= Duration::from_millis(100),
        "{retry_after:?}"
    );
    std::thread::sleep(Duration::from_millis(110));
    let got = ask(
        &c,
        (0..2)
            .map(|_| decide(&base, Some((10.0, 5)), 0, ids.next(), 1000))
            .collect(),
    );
    assert_eq!(got.iter().filter(|o| admitted(o)).count(), 1, "{got:?}");
    // Keyed limiters are independent, and named by a hash of the key.
    let other = key_base("t", Some(b"client-b"));
    assert!(
        other.starts_with("rl:{t:") && other.ends_with('}') && other.len() == 39,
        "{other}"
    );
    let got = ask(
        &c,
        vec![decide(&other, Some((10.0, 5)), 0, ids.next(), 1000)],
    );
    assert!(admitted(&got[0]));
    assert!(
        s.int(&["PTTL", "rl:{t}:gcra"]).unwrap() > 0,
        "the bucket expires"
    );
}

#[test]
fn leases_cap_concurrency_release_and_expire() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let base = key_base("lease", None);
    let ids = LeaseIds::default();
    let members: Vec<String> = (0..4).map(|_| ids.next()).collect();
    let got = ask(
        &c,
        members
            .iter()
            .map(|m| decide(&base, None, 3, m.clone(), 300))
            .collect(),
    );
    assert_eq!(got.iter().filter(|o| admitted(o)).count(), 3, "{got:?}");
    assert_eq!(got[3], Answer::Reply(Reply::Busy { leases: 3 }));
    assert_eq!(s.int(&["ZCARD", "rl:{lease}:leases"]).unwrap(), 3);
    // A release frees a place at once.
    let got = ask(
        &c,
        vec![
            Op::Release {
                base: base.clone(),
                member: members[0].clone(),
            },
            decide(&base, None, 3, ids.next(), 300),
        ],
    );
    assert_eq!(got[0], Answer::Reply(Reply::Released));
    assert!(admitted(&got[1]), "{got:?}");
    // Leases nobody gives back expire after their TTL.
    std::thread::sleep(Duration::from_millis(350));
    let got = ask(
        &c,
        (0..3)
            .map(|_| decide(&base, None, 3, ids.next(), 300))
            .collect(),
    );
    assert_eq!(got.iter().filter(|o| admitted(o)).count(), 3, "{got:?}");
}

#[test]
fn a_busy_limiter_does_not_charge_the_rate() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let base = key_base("both", None);
    let ids = LeaseIds::default();
    let first = ids.next();
    // Rate 1/s burst 2, one concurrent.
    let got = ask(
        &c,
        vec![decide(&base, Some((1.0, 2)), 1, first.clone(), 5000)],
    );
    assert!(admitted(&got[0]));
    let got = ask(
        &c,
        (0..5)
            .map(|_| decide(&base, Some((1.0, 2)), 1, ids.next(), 5000))
            .collect(),
    );
    assert!(
        got.iter()
            .all(|o| matches!(o, Answer::Reply(Reply::Busy { .. }))),
        "{got:?}"
    );
    let release = Op::Release {
        base: base.clone(),
        member: first,
    };
    let got = ask(
        &c,
        vec![release, decide(&base, Some((1.0, 2)), 1, ids.next(), 5000)],
    );
    // The second token of the burst is still there.
    assert!(admitted(&got[1]), "{got:?}");
}

#[test]
fn a_lost_script_is_loaded_again() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let ids = LeaseIds::default();
    let base = key_base("flush", None);
    assert!(admitted(
        &ask(&c, vec![decide(&base, None, 10, ids.next(), 1000)])[0]
    ));
    assert!(s.command(&["SCRIPT", "FLUSH"]).unwrap().starts_with("+OK"));
    let got = ask(
        &c,
        (0..3)
            .map(|_| decide(&base, None, 10, ids.next(), 1000))
            .collect(),
    );
    assert!(got.iter().all(admitted), "{got:?}");
    assert_eq!(s.int(&["ZCARD", "rl:{flush}:leases"]).unwrap(), 4);
}

#[test]
fn many_decisions_share_round_trips_and_stay_exact() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let ids = LeaseIds::default();
    let base = key_base("many", None);
    let n = 5000;
    let ops = (0..n)
        .map(|_| decide(&base, None, 1234, ids.next(), 10_000))
        .collect();
    let got = ask(&c, ops);
    assert_eq!(got.iter().filter(|o| admitted(o)).count(), 1234);
    let rt = c
        .stats()
        .round_trips
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(rt < n as u64 / 4, "{rt} round trips for {n} decisions");
}

#[test]
fn a_full_queue_gives_the_token_back() {
    // A listener that never answers holds every request until its deadline.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = Addr {
        host: "127.0.0.1".into(),
        port: silent.local_addr().unwrap().port(),
        db: 0,
    };
    let cfg = Config {
        capacity: 4,
        ..Config::default()
    };
    let c: C = Client::start("store-test", Redis::new(&addr).unwrap(), cfg).unwrap();
    let op = || Op::Release {
        base: "rl:{x}".into(),
        member: "m".into(),
    };
    for i in 0..4 {
        c.submit(op(), i, Duration::from_millis(200)).unwrap();
    }
    assert!(matches!(
        c.submit(op(), 9, TIMEOUT),
        Err((9, SubmitError::Full))
    ));
    let got = collect(&c, 4);
    assert!(got.iter().all(|(_, o, _)| *o == Answer::Timeout), "{got:?}");
    // Each waited its deadline, not much more.
    for (_, _, waited) in &got {
        assert!(*waited < Duration::from_millis(400), "{waited:?}");
    }
    assert!(c.submit(op(), 10, TIMEOUT).is_ok(), "room again");
}

#[test]
fn an_outage_fails_fast_and_service_returns_within_a_second() {
    let mut s = Server::start().unwrap();
    let c = client(s.port());
    let ids = LeaseIds::default();
    let base = key_base("outage", None);
    assert!(admitted(
        &ask(&c, vec![decide(&base, None, 100, ids.next(), 1000)])[0]
    ));
    s.stop();
    let started = Instant::now();
    let mut errors = 0;
    while started.elapsed() < Duration::from_millis(500) {
        let got = collect_one(&c, decide(&base, None, 100, ids.next(), 1000));
        assert!(
            got.1 < TIMEOUT + Duration::from_millis(50),
            "waited {:?}",
            got.1
        );
        assert!(!admitted(&got.0));
        errors += matches!(got.0, Answer::Error(_)) as u32;
    }
    assert!(errors > 0);
    s.restart().unwrap();
    let back = Instant::now();
    let ok = ats_tests::wait_until(Duration::from_secs(2), || {
        admitted(&collect_one(&c, decide(&base, None, 100, ids.next(), 1000)).0)
    });
    assert!(
        ok && back.elapsed() < Duration::from_secs(1),
        "{:?}",
        back.elapsed()
    );
}

#[test]
fn a_slow_store_times_out_by_the_deadline() {
    let s = Server::start().unwrap();
    // Answers 150 ms late against a 50 ms deadline: a request must end near
    // its deadline (within 130 ms on a loaded machine), before the answer.
    // (Longer delays would also outlast the 200 ms connect timeout below.)
    let slow = DelayProxy::start(s.port(), Duration::from_millis(150)).unwrap();
    let c = client(slow.port());
    let ids = LeaseIds::default();
    let base = key_base("slow", None);
    for _ in 0..3 {
        let op = decide(&base, None, 100, ids.next(), 1000);
        c.submit(op, 0, Duration::from_millis(50)).unwrap();
        let (_, o, waited) = collect(&c, 1).remove(0);
        assert!(matches!(o, Answer::Timeout | Answer::Error(_)), "{o:?}");
        assert!(waited < Duration::from_millis(130), "{waited:?}");
    }
    // With a longer deadline the same slow store answers.
    std::thread::sleep(Duration::from_millis(600));
    let op = decide(&base, None, 100, ids.next(), 1000);
    c.submit(op, 0, Duration::from_secs(2)).unwrap();
    let (_, o, _) = collect(&c, 1).remove(0);
    assert!(admitted(&o), "{o:?}");
}

fn collect_one(c: &C, op: Op) -> (Answer<Reply>, Duration) {
    c.submit(op, 0, TIMEOUT).expect("room");
    let (_, o, waited) = collect(c, 1).remove(0);
    (o, waited)
}

#[test]
fn sync_counts_every_proxys_hits_per_period_of_the_servers_clock() {
    let s = Server::start().unwrap();
    let (a, b) = (client(s.port()), client(s.port()));
    let base = key_base("sync", Some(b"client-1"));
    let sync = |c: &C, hits: u32| -> (u64, [u64; 2]) {
        let op = Op::Sync {
            base: base.clone(),
            period_ms: 300,
            hits,
        };
        match ask(c, vec![op]).remove(0) {
            Answer::Reply(Reply::Synced {
                period, previous, ..
            }) => (period, previous),
            o => panic!("{o:?}"),
        }
    };
    // Two proxies' hits in one period (retried if a boundary fell between).
    let mut period = 0;
    for _ in 0..5 {
        let (p1, _) = sync(&a, 5);
        let (p2, _) = sync(&b, 7);
        if p1 == p2 {
            period = p1;
            break;
        }
    }
    assert!(period > 0, "never two syncs in one period");
    // Next period: both learn its total, 12 (a retry's hits went to an
    // earlier period).
    assert!(ats_tests::wait_until(Duration::from_secs(2), || sync(
        &a, 0
    )
    .0 == period
        + 1));
    let (p, previous) = sync(&b, 0);
    assert_eq!((p, previous[0]), (period + 1, 12));
    // Two periods on, it is still told (a sync may skip a period).
    assert!(ats_tests::wait_until(Duration::from_secs(2), || sync(
        &a, 0
    )
    .0 == period
        + 2));
    assert_eq!(sync(&b, 0), (period + 2, [0, 12]));
    let counter = format!("{base}:sync:{period}");
    assert!(s.int(&["PTTL", &counter]).unwrap() > 0, "periods expire");
}

/// A database other than 0 is selected on connect (the connection is
/// crates/store's own, not the crate's), and a host name is resolved.
#[test]
fn a_named_host_and_a_database_are_honoured() {
    let s = Server::start().unwrap();
    let on = |host: &str, db| {
        let addr = Addr {
            host: host.into(),
            port: s.port(),
            db,
        };
        let c: C = Client::start("store-test", Redis::new(&addr).unwrap(), Config::default())
            .expect("thread");
        c
    };
    let (db3, db0) = (on("localhost", 3), on("127.0.0.1", 0));
    let ids = LeaseIds::default();
    let base = key_base("db", None);
    let one = |c: &C| ask(c, vec![decide(&base, None, 1, ids.next(), 10_000)]).remove(0);
    assert!(admitted(&one(&db3)));
    assert_eq!(one(&db3), Answer::Reply(Reply::Busy { leases: 1 }));
    // Database 0 holds no lease of database 3.
    assert!(admitted(&one(&db0)));
    assert_eq!(s.int(&["DBSIZE"]).unwrap(), 1);
}

/// `--count-status` in Redis: a checking decision takes nothing from the
/// rate (only its lease), and a charge takes one token whether or not one
/// is there, each its full interval below empty.
#[test]
fn check_takes_nothing_and_charges_empty_the_bucket() {
    let s = Server::start().unwrap();
    let c = client(s.port());
    let base = key_base("cs", Some(b"client"));
    let ids = LeaseIds::default();
    // 1/s, burst 3.
    let check = |ids: &LeaseIds| {
        let mut op = decide(&base, Some((1.0, 3)), 0, ids.next(), 1000);
        if let Op::Decide(d) = &mut op {
            d.check_only = true;
        }
        op
    };
    let charge = || Op::Charge {
        base: base.clone(),
        interval_us: 1_000_000,
        burst: 3,
    };
    let got = ask(&c, (0..10).map(|_| check(&ids)).collect());
    assert!(got.iter().all(admitted), "checks take nothing: {got:?}");
    let got = ask(&c, (0..3).map(|_| charge()).collect());
    assert!(
        got.iter()
            .all(|o| matches!(o, Answer::Reply(Reply::Charged))),
        "{got:?}"
    );
    let got = ask(&c, vec![check(&ids)]);
    let Answer::Reply(Reply::TooSoon { retry_after }) = &got[0] else {
        panic!("three charges empty a burst of 3: {got:?}");
    };
    assert!(*retry_after <= Duration::from_secs(1), "{retry_after:?}");
    // Ten more (requests that passed together): each costs its full
    // second, so the wait is (10 + 1) s less the time gone.
    ask(&c, (0..10).map(|_| charge()).collect());
    let got = ask(&c, vec![check(&ids)]);
    let Answer::Reply(Reply::TooSoon { retry_after }) = &got[0] else {
        panic!("{got:?}");
    };
    assert!(
        *retry_after > Duration::from_secs(10) && *retry_after <= Duration::from_secs(11),
        "{retry_after:?}"
    );
    // A normal decision on another key is untouched.
    let other = key_base("cs", Some(b"other"));
    let got = ask(
        &c,
        vec![decide(&other, Some((1.0, 3)), 0, ids.next(), 1000)],
    );
    assert!(admitted(&got[0]), "{got:?}");
}

/// `--block`: a rate refusal starts a block that every proxy sees, which
/// refuses before the bucket and the leases are touched, then expires.
#[test]
fn a_block_starts_on_a_rate_refusal_refuses_everyone_then_expires() {
    let s = Server::start().unwrap();
    let (a, b) = (client(s.port()), client(s.port()));
    let base = key_base("blk", Some(b"client-a"));
    let ids = LeaseIds::default();
    let blocking = |ids: &LeaseIds| {
        let Op::Decide(mut d) = decide(&base, Some((10.0, 1)), 2, ids.next(), 1000) else {
            unreachable!()
        };
        d.block_us = 400_000;
        Op::Decide(d)
    };
    let got = ask(&a, vec![blocking(&ids), blocking(&ids)]);
    assert!(admitted(&got[0]), "{got:?}");
    let Answer::Reply(Reply::Blocked {
        started: true,
        retry_after,
    }) = got[1]
    else {
        panic!("the refusal starts the block: {got:?}");
    };
    assert_eq!(retry_after, Duration::from_millis(400));
    // Another proxy: refused by the block even once the bucket refilled
    // (100 ms), and nothing is taken (the lease count stays at one).
    std::thread::sleep(Duration::from_millis(150));
    let got = ask(&b, vec![blocking(&ids)]);
    let Answer::Reply(Reply::Blocked {
        started: false,
        retry_after,
    }) = got[0]
    else {
        panic!("held: {got:?}");
    };
    assert!(retry_after <= Duration::from_millis(250), "{retry_after:?}");
    assert_eq!(s.int(&["ZCARD", &format!("{base}:leases")]).unwrap(), 1);
    assert!(
        s.int(&["PTTL", &format!("{base}:block")]).unwrap() > 0,
        "it expires"
    );
    std::thread::sleep(Duration::from_millis(300));
    let got = ask(&b, vec![blocking(&ids)]);
    assert!(admitted(&got[0]), "the block is over: {got:?}");
    // Without a block length, the same refusal blocks nothing.
    let plain = key_base("blk", Some(b"client-b"));
    let got = ask(
        &a,
        (0..2)
            .map(|_| decide(&plain, Some((10.0, 1)), 0, ids.next(), 1000))
            .collect(),
    );
    assert!(
        matches!(got[1], Answer::Reply(Reply::TooSoon { .. })),
        "{got:?}"
    );
    assert_eq!(s.int(&["EXISTS", &format!("{plain}:block")]).unwrap(), 0);
}

/// `--store-sync` with `--block`: a block stored by one proxy is told to
/// every proxy's next sync of the key, with its time left, until it expires.
#[test]
fn a_sync_tells_the_keys_block_until_it_expires() {
    let s = Server::start().unwrap();
    let (a, b) = (client(s.port()), client(s.port()));
    let base = key_base("sync", Some(b"client-9"));
    let blocked = |c: &C| match ask(
        c,
        vec![Op::Sync {
            base: base.clone(),
            period_ms: 1000,
            hits: 1,
        }],
    )
    .remove(0)
    {
        Answer::Reply(Reply::Synced { blocked_ms, .. }) => blocked_ms,
        o => panic!("{o:?}"),
    };
    assert_eq!(blocked(&b), 0, "no block yet");
    let set = ask(
        &a,
        vec![Op::Block {
            base: base.clone(),
            ms: 300,
        }],
    );
    assert!(matches!(set[0], Answer::Reply(Reply::BlockSet)), "{set:?}");
    let left = blocked(&b);
    assert!((1..=300).contains(&left), "{left}");
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(blocked(&b), 0, "expired");
}
