//! One connection's decision, with a manual clock: each step of the gate
//! and a reload that keeps the live state.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use limits::{ManualClock, Permit, Waiter, NANOS_PER_SEC};
use rate_limit_core::SlotWait;

use crate::config::parse;
use crate::{Hold, Refusal, Selectors, Verdict};

/// A parked handshake of the tests: records that it got a slot.
struct W {
    got: Arc<Mutex<Vec<Permit<W>>>>,
}

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        self.got.lock().unwrap().push(permit);
        Ok(())
    }
}

type Clock = Arc<ManualClock>;
type Sels = Selectors<W, Clock>;

fn load(yaml: &str, old: Option<&Sels>, clock: &Clock) -> Sels {
    let c = parse(yaml, "g.yaml").unwrap_or_else(|e| panic!("{e}"));
    Selectors::build(&c, old, clock.clone())
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

fn go(v: Verdict<W, Clock>) -> Hold<W, Clock> {
    match v {
        Verdict::Go(h) => h,
        Verdict::Excluded => panic!("excluded"),
        Verdict::Wait(_) => panic!("waits"),
        Verdict::Refuse(r) => panic!("refused: {r:?}"),
    }
}

fn refusal(v: Verdict<W, Clock>) -> Option<Refusal> {
    match v {
        Verdict::Refuse(r) => Some(r),
        _ => None,
    }
}

#[test]
fn selectors_pick_by_name_alias_catch_all_and_no_sni() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    aliases: [b.test]\n    limit: 1\n  - sni: '*'\n    limit: 2\n  - sni: ''\n    limit: 3\n",
        None,
        &clock,
    );
    let limit = |sni: Option<&[u8]>| s.select(sni).and_then(|x| x.conf().limit);
    assert_eq!(limit(Some(b"a.test")), Some(1));
    assert_eq!(limit(Some(b"A.Test.")), Some(1));
    assert_eq!(limit(Some(b"B.TEST")), Some(1));
    assert_eq!(limit(Some(b"c.test")), Some(2));
    assert_eq!(limit(Some(&[0xff; 300])), Some(2));
    assert_eq!(limit(None), Some(3));
    assert_eq!(limit(Some(b"")), Some(3));
    // Without a "" selector, the catch-all takes connections without an SNI.
    let s = load(
        "selector:\n  - sni: a.test\n    limit: 1\n  - sni: default\n    limit: 2\n",
        None,
        &clock,
    );
    assert_eq!(s.select(None).and_then(|x| x.conf().limit), Some(2));
    // Without either, nothing takes them.
    let s = load("selector:\n  - sni: a.test\n    limit: 1\n", None, &clock);
    assert!(s.select(None).is_none() && s.select(Some(b"b.test")).is_none());
}

#[test]
fn limit_then_queue_then_refusal() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      size: 1\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    let first = go(sel.admit(ip("192.0.2.1")));
    let got = Arc::new(Mutex::new(Vec::new()));
    let Verdict::Wait(p) = sel.admit(ip("192.0.2.2")) else {
        panic!("the second waits");
    };
    assert_eq!(refusal(sel.admit(ip("192.0.2.3"))), Some(Refusal::Full));
    let (wait, per_ip) = p.into_parts();
    assert_eq!(wait.rate_delay, 0);
    let queued = sel
        .limiter()
        .unwrap()
        .wait_for_slot(wait.since, W { got: got.clone() });
    assert!(matches!(queued, SlotWait::Queued { .. }));
    assert_eq!(sel.open(), 1);
    drop(first);
    // The freed slot went to the waiter at once.
    let permit = got.lock().unwrap().pop().expect("admitted");
    let held = sel.hold(Some(permit), per_ip);
    assert_eq!(
        (
            sel.open(),
            sel.counts
                .resumed
                .load(std::sync::atomic::Ordering::Relaxed)
        ),
        (1, 1)
    );
    drop(held);
    assert_eq!(sel.open(), 0);
    drop(wait.place);
}

#[test]
fn rate_is_a_rate_with_its_burst() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    rate: 2\n    burst: 2\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    let a = go(sel.admit(ip("192.0.2.1")));
    let b = go(sel.admit(ip("192.0.2.1")));
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::Rate));
    // Closing connections gives no rate back: it counts new connections.
    drop((a, b));
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::Rate));
    clock.advance(Duration::from_millis(500));
    let _c = go(sel.admit(ip("192.0.2.1")));
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::Rate));
    assert_eq!(sel.counts.refused(Refusal::Rate), 3);
}

#[test]
fn a_rate_wait_with_a_queue() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    rate: 1\n    queue:\n      size: 5\n      max-age: 3\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    let _a = go(sel.admit(ip("192.0.2.1")));
    let Verdict::Wait(p) = sel.admit(ip("192.0.2.1")) else {
        panic!("waits for the rate");
    };
    assert_eq!(p.wait.rate_delay, NANOS_PER_SEC);
    let Verdict::Wait(q) = sel.admit(ip("192.0.2.1")) else {
        panic!("waits for the rate");
    };
    assert_eq!(q.wait.rate_delay, 2 * NANOS_PER_SEC);
    let Verdict::Wait(_r) = sel.admit(ip("192.0.2.1")) else {
        panic!("3 s is within max-age");
    };
    // A fourth wait would pass max-age: refused.
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::Rate));
}

#[test]
fn excluded_addresses_pass_and_count_toward_nothing() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    limit: 1\n    rate: 1\n    exclude: inside\n    ip-rep: r\n    per-ip: {limit: 1}\nip-rep:\n  - name: r\n    size: 12\n    percentage: 0\nlists:\n  - name: inside\n    cidr: [10.0.0.0/8, '2001:db8::/32']\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    for _ in 0..50 {
        assert!(matches!(sel.admit(ip("10.1.2.3")), Verdict::Excluded));
        assert!(matches!(sel.admit(ip("2001:db8::7")), Verdict::Excluded));
        assert!(matches!(
            sel.admit(ip("::ffff:10.9.9.9")),
            Verdict::Excluded
        ));
    }
    // The limit, the rate, per-ip and the sieve saw none of them.
    assert_eq!(sel.open(), 0);
    assert_eq!(sel.ip_rep().map(|(_, s)| s.len()), Some(0));
    let _h = go(sel.admit(ip("192.0.2.1")));
    assert_eq!(
        sel.counts
            .excluded
            .load(std::sync::atomic::Ordering::Relaxed),
        150
    );
}

#[test]
fn per_ip_limits_each_address_and_its_v6_network() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    limit: 100\n    per-ip:\n      limit: 2\n      rate: 3\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    let a = go(sel.admit(ip("192.0.2.1")));
    let _b = go(sel.admit(ip("192.0.2.1")));
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::PerIp));
    let _other = go(sel.admit(ip("192.0.2.2")));
    drop(a);
    // A refused attempt spent nothing: the third new connection goes.
    drop(go(sel.admit(ip("192.0.2.1"))));
    // The fourth is over the rate, though a slot is free.
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::PerIp));
    clock.advance(Duration::from_secs(1));
    let _c = go(sel.admit(ip("192.0.2.1")));
    // One /64 is one client.
    let _v1 = go(sel.admit(ip("2001:db8:1:2::1")));
    let _v2 = go(sel.admit(ip("2001:db8:1:2::ffff")));
    assert_eq!(
        refusal(sel.admit(ip("2001:db8:1:2:3::9"))),
        Some(Refusal::PerIp)
    );
    let _v3 = go(sel.admit(ip("2001:db8:1:3::1")));
    assert_eq!(sel.per_ip_keys(), Some(4));
}

#[test]
fn ip_rep_refuses_the_heavy_address_under_pressure_and_lets_a_light_one_in() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    limit: 10\n    ip-rep: r\nip-rep:\n  - name: r\n    buckets: 10\n    size: 12\n    percentage: 50\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    let heavy = ip("198.51.100.66");
    // No pressure: the heavy address comes and goes 20 times, and climbs.
    for _ in 0..20 {
        drop(go(sel.admit(heavy)));
    }
    let mut held: Vec<_> = (1..=8)
        .map(|i| go(sel.admit(ip(&format!("203.0.113.{i}")))))
        .collect();
    // 80 % of the limit, 30 points over 50: rank 6 and hotter are refused.
    assert_eq!(sel.pressure(), Some(6));
    assert_eq!(refusal(sel.admit(heavy)), Some(Refusal::IpRep));
    // A newcomer (the entry bucket) still gets a slot.
    held.push(go(sel.admit(ip("192.0.2.200"))));
    assert_eq!(sel.pressure(), Some(8));
    assert_eq!(sel.counts.refused(Refusal::IpRep), 1);
    // Below `percentage` the sieve refuses nobody.
    held.truncate(4);
    assert_eq!(sel.pressure(), None);
    held.push(go(sel.admit(heavy)));
}

#[test]
fn a_reload_keeps_open_connections_parked_handshakes_and_the_bucket() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let old = load(
        "selector:\n  - sni: a.test\n    limit: 2\n    rate: 100\n    burst: 3\n",
        None,
        &clock,
    );
    let a = go(old.select(Some(b"a.test")).unwrap().admit(ip("192.0.2.1")));
    let b = go(old.select(Some(b"a.test")).unwrap().admit(ip("192.0.2.1")));
    // The new file lowers the limit to 1 and keeps the rate's presence.
    let new = load(
        "selector:\n  - sni: a.test\n    limit: 1\n    rate: 100\n    burst: 3\n",
        Some(&old),
        &clock,
    );
    let sel = new.select(Some(b"a.test")).unwrap();
    assert_eq!(sel.open(), 2, "the old file's connections count");
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::Full));
    drop((a, b));
    // The bucket carried over too: 3 of its burst went, so one is left.
    let _c = go(sel.admit(ip("192.0.2.1")));
    // A selector whose shape changed starts afresh.
    let fresh = load(
        "selector:\n  - sni: a.test\n    limit: 1\n",
        Some(&new),
        &clock,
    );
    let f = fresh.select(Some(b"a.test")).unwrap();
    assert!(!Arc::ptr_eq(f.limiter().unwrap(), sel.limiter().unwrap()));
}

#[test]
fn a_selector_without_limits_admits_and_counts() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let s = load(
        "selector:\n  - sni: a.test\n    per-ip: {limit: 1}\n",
        None,
        &clock,
    );
    let sel = s.select(Some(b"a.test")).unwrap();
    assert!(sel.limiter().is_none());
    let h = go(sel.admit(ip("192.0.2.1")));
    assert_eq!(refusal(sel.admit(ip("192.0.2.1"))), Some(Refusal::PerIp));
    // An address unknown to ATS is limited by the selector only.
    let _n = go(sel.admit(None));
    let _m = go(sel.admit(None));
    assert_eq!(sel.open(), 3);
    drop(h);
    assert_eq!(sel.open(), 2);
}

#[test]
fn selectors_naming_one_ip_rep_share_its_sieve_across_reloads() {
    let clock = Arc::new(ManualClock::new(NANOS_PER_SEC));
    let yaml = "selector:\n  - sni: a.test\n    limit: 10\n    ip-rep: r\n  - sni: b.test\n    limit: 10\n    ip-rep: r\nip-rep:\n  - name: r\n    size: 12\n";
    let s = load(yaml, None, &clock);
    let (a, b) = (
        s.select(Some(b"a.test")).unwrap(),
        s.select(Some(b"b.test")).unwrap(),
    );
    let sieve = |x: &Arc<crate::Selector<W, Clock>>| x.ip_rep().map(|(_, s)| s as *const _);
    assert_eq!(sieve(a), sieve(b));
    drop(go(a.admit(ip("192.0.2.1"))));
    drop(go(b.admit(ip("192.0.2.1"))));
    let (_, shared) = b.ip_rep().unwrap();
    assert_eq!(shared.len(), 1, "one address, ranked once for both names");
    // A reload with the same sizing keeps what the sieve learned; a new
    // percentage does not change the sizing.
    let again = load(
        &yaml.replace("size: 12\n", "size: 12\n    percentage: 80\n"),
        Some(&s),
        &clock,
    );
    let a2 = again.select(Some(b"a.test")).unwrap();
    assert_eq!(sieve(a2), sieve(a));
    let resized = load(&yaml.replace("size: 12", "size: 13"), Some(&again), &clock);
    let a3 = resized.select(Some(b"a.test")).unwrap();
    assert_ne!(sieve(a3), sieve(a2));
    assert_eq!(a3.ip_rep().map(|(_, s)| s.len()), Some(0));
}
