//! Both Redis backends on a real three-master Redis Cluster (one per test,
//! loopback): decisions and compare-and-swap on keys spread over every
//! master, redirects, lost scripts, and a master's outage.

use std::time::{Duration, Instant};

use ats_tests::redis_cluster::RedisCluster;
use store::redis::{key_base, Decide, LeaseIds, Op, Redis, Reply, Target};
use store::redis_cas::RedisCas;
use store::rmw::{CasBackend, Rmw, MAX_ROUNDS};

mod counter;
use counter::Add;
use store::url;
use store::{Answer, Client, Config};

const TIMEOUT: Duration = Duration::from_millis(500);

fn target(c: &RedisCluster) -> Target {
    url::redis(&c.url()).expect("a cluster URL")
}

/// Submits every op, waits (at most 5 s) for all; outcomes in order.
fn ask<B: store::Backend>(c: &Client<B, u32>, ops: Vec<B::Op>) -> Vec<Answer<B::Reply>> {
    let n = ops.len();
    for (i, op) in ops.into_iter().enumerate() {
        assert!(c.submit(op, i as u32, TIMEOUT).is_ok(), "room");
    }
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while out.len() < n && Instant::now() < end {
        match c.try_complete() {
            Some(done) => out.push((done.token, done.answer)),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    assert_eq!(out.len(), n, "completions");
    out.sort_by_key(|(t, _)| *t);
    out.into_iter().map(|(_, o)| o).collect()
}

fn decide(base: &str, rate: Option<(f64, u32)>, limit: u32, member: String) -> Op {
    Op::Decide(Decide {
        base: base.to_owned(),
        interval_us: rate.map_or(0, |(r, _)| (1e6 / r) as u64),
        burst: rate.map_or(0, |(_, b)| b),
        limit,
        member,
        lease_ttl_ms: 10_000,
        check_only: false,
        block_us: 0,
    })
}

fn admitted(o: &Answer<Reply>) -> bool {
    matches!(o, Answer::Reply(Reply::Admitted { .. }))
}

fn decisions(c: &RedisCluster) -> Client<Redis, u32> {
    let backend = Redis::new(target(c)).expect("valid target");
    Client::start("cluster-test", backend, Config::default()).expect("thread")
}

/// Client keys whose limiters land on every master.
fn spread_bases(c: &RedisCluster, ns: &str, n: usize) -> Vec<String> {
    let bases: Vec<String> = (0..n)
        .map(|i| key_base(ns, Some(format!("client-{i}").as_bytes())))
        .collect();
    let mut on = [0; 3];
    for b in &bases {
        on[c.node_of(&format!("{b}:gcra")).expect("a node")] += 1;
    }
    assert!(on.iter().all(|&k| k > 0), "keys on every master: {on:?}");
    bases
}

#[test]
fn gcra_and_leases_are_exact_per_key_across_masters() {
    let cl = RedisCluster::start().unwrap();
    let c = decisions(&cl);
    let ids = LeaseIds::default();
    let bases = spread_bases(&cl, "gcra", 60);
    // Rate 1/s, burst 3: each key admits exactly three of five, in one batch.
    let ops = bases
        .iter()
        .flat_map(|b| (0..5).map(|_| decide(b, Some((1.0, 3)), 0, ids.next())))
        .collect();
    let got = ask(&c, ops);
    for (k, per_key) in got.chunks(5).enumerate() {
        let n = per_key.iter().filter(|o| admitted(o)).count();
        assert_eq!(n, 3, "key {k}: {per_key:?}");
        assert!(
            matches!(per_key[4], Answer::Reply(Reply::TooSoon { .. })),
            "{per_key:?}"
        );
    }
    // Leases: a concurrency limit of 2 per key; a release frees one.
    let bases = spread_bases(&cl, "lease", 30);
    let members: Vec<Vec<String>> = bases
        .iter()
        .map(|_| (0..3).map(|_| ids.next()).collect())
        .collect();
    let ops = bases
        .iter()
        .zip(&members)
        .flat_map(|(b, m)| m.iter().map(move |m| decide(b, None, 2, m.clone())))
        .collect();
    let got = ask(&c, ops);
    for per_key in got.chunks(3) {
        assert!(
            admitted(&per_key[0]) && admitted(&per_key[1]),
            "{per_key:?}"
        );
        assert_eq!(per_key[2], Answer::Reply(Reply::Busy { leases: 2 }));
    }
    let releases = bases
        .iter()
        .zip(&members)
        .map(|(b, m)| Op::Release {
            base: b.clone(),
            member: m[0].clone(),
        })
        .collect();
    assert!(ask(&c, releases)
        .iter()
        .all(|o| *o == Answer::Reply(Reply::Released)));
    let again = bases
        .iter()
        .map(|b| decide(b, None, 2, ids.next()))
        .collect();
    assert!(ask(&c, again).iter().all(admitted));
    for b in &bases {
        let key = format!("{b}:leases");
        let n = cl.command(&key, &["ZCARD", &key]).unwrap();
        assert_eq!(n.trim(), ":2", "{key}");
    }
    // The hybrid mode's script runs on the cluster too.
    let sync = bases
        .iter()
        .map(|b| Op::Sync {
            base: b.clone(),
            period_ms: 60_000,
            hits: 3,
        })
        .collect();
    let got = ask(&c, sync);
    assert!(
        got.iter()
            .all(|o| matches!(o, Answer::Reply(Reply::Synced { .. }))),
        "{got:?}"
    );
    assert!(cl.keys_per_node().iter().all(|&n| n > 0));
}

#[test]
fn lost_scripts_and_moved_or_migrating_slots_are_followed() {
    let cl = RedisCluster::start().unwrap();
    let c = decisions(&cl);
    let ids = LeaseIds::default();
    let bases = spread_bases(&cl, "flush", 12);
    let ops = bases
        .iter()
        .map(|b| decide(b, None, 10, ids.next()))
        .collect();
    assert!(ask(&c, ops).iter().all(admitted));
    for n in cl.nodes() {
        assert!(n.command(&["SCRIPT", "FLUSH"]).unwrap().starts_with("+OK"));
    }
    let ops = bases
        .iter()
        .map(|b| decide(b, None, 10, ids.next()))
        .collect();
    let got = ask(&c, ops);
    assert!(got.iter().all(admitted), "{got:?}");

    // Move an empty slot to another master behind the client's back: its
    // next decision there is redirected (MOVED) and followed.
    let base = key_base("moved", None);
    let key = format!("{base}:leases");
    let from = cl.node_of(&key).unwrap();
    let to = (from + 1) % 3;
    let slot = cl.nodes()[0]
        .int(&["CLUSTER", "KEYSLOT", &key])
        .unwrap()
        .to_string();
    let to_id = cl.id(to).unwrap();
    for i in [to, from, (from + 2) % 3] {
        let a = cl.nodes()[i]
            .command(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])
            .unwrap();
        assert!(a.starts_with("+OK"), "{a}");
    }
    assert_eq!(cl.node_of(&key).unwrap(), to);
    let got = ask(&c, vec![decide(&base, None, 10, ids.next())]);
    assert!(admitted(&got[0]), "{got:?}");
    assert_eq!(cl.nodes()[to].int(&["ZCARD", &key]).unwrap(), 1);

    // A slot being migrated: the source answers ASK for keys it lacks; the
    // client asks the importing master (with ASKING), its map unchanged.
    // Its keys are `rl:{asked}:…`, in the slot of "asked".
    let base = key_base("asked", None);
    let key = format!("{base}:leases");
    let from = cl.node_of(&key).unwrap();
    let to = (from + 1) % 3;
    let slot = cl.nodes()[0]
        .int(&["CLUSTER", "KEYSLOT", &key])
        .unwrap()
        .to_string();
    let (from_id, to_id) = (cl.id(from).unwrap(), cl.id(to).unwrap());
    for (i, how, id) in [(to, "IMPORTING", &from_id), (from, "MIGRATING", &to_id)] {
        let a = cl.nodes()[i]
            .command(&["CLUSTER", "SETSLOT", &slot, how, id])
            .unwrap();
        assert!(a.starts_with("+OK"), "{a}");
    }
    // A decision's two keys, both absent: Redis refuses multi-key commands
    // on a slot in migration (TRYAGAIN); that decision alone fails.
    let got = ask(&c, vec![decide(&base, None, 10, ids.next())]);
    assert!(
        matches!(&got[0], Answer::Error(e) if e.contains("TRYAGAIN")),
        "{got:?}"
    );
    // One key per command (ip_throttle's records): GET and the CAS script
    // go to the importing master.
    let cas = cas(&cl);
    let rec = "ipt:{asked}";
    for n in 1..=2 {
        let got = ask(&cas, adds(&[rec.to_owned()], 1));
        assert_eq!(got, vec![Answer::Reply(n)]);
    }
    let on = |i: usize| cl.nodes()[i].int(&["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!((on(from).unwrap(), on(to).unwrap()), (0, 1));
}

#[test]
fn a_masters_outage_ends_each_request_by_its_deadline_then_service_returns() {
    let mut cl = RedisCluster::start().unwrap();
    let c = decisions(&cl);
    let ids = LeaseIds::default();
    let bases = spread_bases(&cl, "outage", 12);
    let ops = |ids: &LeaseIds| {
        bases
            .iter()
            .map(|b| decide(b, None, 1000, ids.next()))
            .collect()
    };
    assert!(ask(&c, ops(&ids)).iter().all(admitted));
    // The requests whose keys live on the stopped master.
    let on_stopped: Vec<bool> = bases
        .iter()
        .map(|b| cl.node_of(&format!("{b}:gcra")).ok() == Some(1))
        .collect();
    cl.node_mut(1).stop();
    for _ in 0..5 {
        let t = Instant::now();
        let got = ask(&c, ops(&ids));
        // Those fail; the others may too (a batch that needs the stopped
        // master fails whole) or be answered (a batch the I/O thread took
        // before the rest arrived, without that master's keys).
        for (o, stopped) in got.iter().zip(&on_stopped) {
            assert!(
                !stopped || matches!(o, Answer::Error(_) | Answer::Timeout),
                "{got:?}"
            );
        }
        assert!(
            got.iter()
                .any(|o| matches!(o, Answer::Error(_) | Answer::Timeout)),
            "{got:?}"
        );
        assert!(
            t.elapsed() < TIMEOUT + Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }
    cl.node_mut(1).restart().unwrap();
    cl.wait_ok(Duration::from_secs(10)).unwrap();
    let back = Instant::now();
    while !ask(&c, ops(&ids)).iter().all(admitted) {
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "not back within 2 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hung_master_costs_each_request_at_most_its_deadline() {
    let cl = RedisCluster::start().unwrap();
    let c = decisions(&cl);
    let ids = LeaseIds::default();
    let bases = spread_bases(&cl, "hung", 12);
    let ops = |ids: &LeaseIds| {
        bases
            .iter()
            .map(|b| decide(b, None, 1000, ids.next()))
            .collect()
    };
    assert!(ask(&c, ops(&ids)).iter().all(admitted));
    // Connections stay open; one master stops answering.
    cl.nodes()[2].freeze(true).unwrap();
    let t = Instant::now();
    let got = ask(&c, ops(&ids));
    let took = t.elapsed();
    cl.nodes()[2].freeze(false).unwrap();
    assert!(
        got.iter()
            .all(|o| matches!(o, Answer::Timeout | Answer::Error(_))),
        "{got:?}"
    );
    assert!(got.contains(&Answer::Timeout), "{got:?}");
    assert!(took < TIMEOUT + Duration::from_millis(100), "{took:?}");
    let back = Instant::now();
    while !ask(&c, ops(&ids)).iter().all(admitted) {
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "not back within 2 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

type Cas = Client<CasBackend<RedisCas, Add>, u32>;

fn cas(cl: &RedisCluster) -> Cas {
    let store = RedisCas::new(target(cl)).expect("valid target");
    Client::start("cluster-cas", CasBackend::new(store), Config::default()).expect("thread")
}

fn adds(keys: &[String], each: usize) -> Vec<Rmw<Add>> {
    keys.iter()
        .flat_map(|k| {
            (0..each).map(|_| Rmw {
                key: k.clone(),
                modify: Add { by: 1 },
            })
        })
        .collect()
}

/// ip_throttle-like keys over every master.
fn spread_keys(cl: &RedisCluster, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("ipt:test:10.0.0.{i}")).collect();
    let mut on = [0; 3];
    for k in &keys {
        on[cl.node_of(k).unwrap()] += 1;
    }
    assert!(on.iter().all(|&k| k > 0), "keys on every master: {on:?}");
    keys
}

fn value(cl: &RedisCluster, key: &str) -> u64 {
    let a = cl.command(key, &["GET", key]).unwrap();
    a.split("\r\n")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn compare_and_swap_on_keys_across_masters() {
    let cl = RedisCluster::start().unwrap();
    let c = cas(&cl);
    let keys = spread_keys(&cl, 30);
    let got = ask(&c, adds(&keys, 4));
    for (k, per_key) in got.chunks(4).enumerate() {
        let v: Vec<Answer<u64>> = (1..=4).map(Answer::Reply).collect();
        assert_eq!(per_key, v.as_slice(), "key {k}");
    }
    for k in &keys {
        assert_eq!(value(&cl, k), 4, "{k}");
    }
}

/// Two proxies (two clients) adding to keys on every master at once lose
/// no update.
#[test]
fn two_racing_clients_lose_no_update_across_masters() {
    let cl = RedisCluster::start().unwrap();
    let keys = spread_keys(&cl, 6);
    let run = |keys: Vec<String>, c: Cas| {
        std::thread::spawn(move || {
            let mut ok = vec![0u64; keys.len()];
            for _ in 0..20 {
                for (i, o) in ask(&c, adds(&keys, 3)).iter().enumerate() {
                    if matches!(o, Answer::Reply(_)) {
                        ok[i / 3] += 1;
                    }
                }
            }
            ok
        })
    };
    let (a, b) = (run(keys.clone(), cas(&cl)), run(keys.clone(), cas(&cl)));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let mut total = 0;
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            value(&cl, k),
            a[i] + b[i],
            "every acknowledged update of {k} is stored"
        );
        total += a[i] + b[i];
    }
    let sent = 2 * 20 * 3 * keys.len() as u64;
    assert!(
        total >= sent * 95 / 100,
        "few may give up after {MAX_ROUNDS} races: {total} of {sent}"
    );
}
