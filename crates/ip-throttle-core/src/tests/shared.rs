use std::net::IpAddr;

use proptest::prelude::*;

use super::{MS, S};
use crate::shared::{self, key, request, valid_instance, Now, Record, Write, MAX_TTL_SECS};
use crate::state::{IpState, Params, Phase, Step};

fn params() -> Params {
    Params {
        initial_delay: S,
        max_delay: 4 * S,
        threshold: S,
        max_concurrent: 1000,
        ban_threshold: 3,
        ban_expiration: 10 * S,
    }
}

/// Two proxies whose monotonic clocks started at different times.
fn now_a(wall_ms: u64) -> Now {
    Now {
        mono: wall_ms * MS - 1_700_000_000_000 * MS,
        wall_ms,
    }
}
fn now_b(wall_ms: u64) -> Now {
    Now {
        mono: 5 * S + (wall_ms - 1_700_000_000_000) * MS,
        wall_ms,
    }
}
const T0: u64 = 1_700_000_000_000;

/// A memcached-like store with compare-and-swap: `gets` gives a version.
#[derive(Default)]
struct Store {
    value: Option<String>,
    version: u64,
}

impl Store {
    fn gets(&self) -> (Option<String>, u64) {
        (self.value.clone(), self.version)
    }
    fn cas(&mut self, version: u64, w: &Write) -> bool {
        if version != self.version {
            return false;
        }
        match w {
            Write::Keep => return true,
            Write::Set { value, .. } => self.value = Some(value.clone()),
            Write::Delete => self.value = None,
        }
        self.version += 1;
        true
    }
}

/// One request through the store, retrying lost races like the I/O thread.
fn through(store: &mut Store, local: &mut IpState, now: Now, p: &Params) -> Step {
    let (v, ver) = store.gets();
    let u = request(v.as_deref().map(str::as_bytes), *local, now, p);
    assert!(store.cas(ver, &u.write));
    *local = u.state;
    if let Step::Delay(_) = u.step {
        local.undelay();
    }
    u.step
}

#[test]
fn a_record_round_trips_through_text_across_clocks() {
    let p = params();
    let mut s = IpState::default();
    let n = now_a(T0);
    s.advance(n.mono, &p);
    s.request(n.mono, &p);
    s.request(n.mono + 100 * MS, &p);
    s.undelay();
    let r = Record::of(&s, now_a(T0 + 100)).expect("throttled");
    assert_eq!(r.phase, Phase::Throttled);
    assert_eq!(
        r.at_ms,
        T0 + 100 + 1000,
        "the delay ends 1 s after the request"
    );
    assert_eq!(r.delay_ms, 1000);
    let text = r.encode();
    assert_eq!(text, format!("1 throttled {} 1000 0", T0 + 1100));
    assert_eq!(Record::decode(text.as_bytes()), Some(r));
    // Read on B, whose monotonic clock has another origin: same instants
    // (the delay ends in 0.9 s; probation follows a delay later).
    let b = r.onto(IpState::default(), now_b(T0 + 200), &p);
    let v = b.view(now_b(T0 + 200).mono, &p);
    assert_eq!(
        (v.phase, v.delay, v.remaining),
        (Phase::Throttled, S, 1900 * MS)
    );
}

#[test]
fn malformed_or_foreign_records_count_as_absent() {
    for bad in [
        &b""[..],
        b"2 throttled 1 1 1",
        b"1 allowed 1 1 1",
        b"1 throttled 1 1",
        b"1 throttled 1 1 1 1",
        b"1 throttled -1 1 1",
        b"1 throttled 1 1 99999999999",
        b"1  throttled 1 1 1",
        b"\xff\xfe",
        &[b'1'; 200][..],
    ] {
        assert_eq!(
            Record::decode(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
        let u = request(Some(bad), IpState::default(), now_a(T0), &params());
        assert_eq!(u.step, Step::Pass, "an unreadable record is an allowed IP");
    }
}

#[test]
fn a_ban_earned_on_one_proxy_holds_on_another_until_it_ends() {
    let p = params();
    let mut store = Store::default();
    let (mut a, mut b) = (IpState::default(), IpState::default());
    let mut t = T0;
    // Pass, then throttled with violations 0, 1, 2, 3; the next one bans.
    let mut steps = Vec::new();
    for _ in 0..6 {
        steps.push(through(&mut store, &mut a, now_a(t), &p));
        t += 10;
    }
    assert_eq!(steps[0], Step::Pass);
    assert_eq!(steps[5], Step::Ban, "{steps:?}");
    let banned_at = t - 10;
    // B never saw this IP; the record bans it.
    assert_eq!(through(&mut store, &mut b, now_b(t), &p), Step::Banned);
    assert_eq!(
        through(&mut store, &mut b, now_b(banned_at + 9_999), &p),
        Step::Banned
    );
    // At the ban's end (10 s) B lets it in and says the ban ended.
    let (v, _) = store.gets();
    let u = request(
        v.as_deref().map(str::as_bytes),
        b,
        now_b(banned_at + 10_000),
        &p,
    );
    assert!(u.unbanned);
    assert_eq!(u.step, Step::Pass);
}

#[test]
fn a_record_cannot_ban_or_delay_beyond_this_proxys_own_limits() {
    let p = params();
    let n = now_a(T0);
    let forever = Record {
        phase: Phase::Banned,
        at_ms: u64::MAX,
        delay_ms: u64::MAX,
        violations: u32::MAX,
    };
    let s = forever.onto(IpState::default(), n, &p);
    assert_eq!(s.view(n.mono, &p).remaining, p.ban_expiration);
    let throttled = Record {
        phase: Phase::Throttled,
        ..forever
    };
    let s = throttled.onto(IpState::default(), n, &p);
    // As a throttling that started now: the delay ends after max_delay,
    // probation a delay later.
    let v = s.view(n.mono, &p);
    assert_eq!((v.delay, v.remaining), (p.max_delay, 2 * p.max_delay));
}

#[test]
fn records_expire_when_the_ip_would_be_allowed_again() {
    let p = params();
    let n = now_a(T0);
    let r = |phase, at_ms, delay_ms| Record {
        phase,
        at_ms,
        delay_ms,
        violations: 0,
    };
    // Probation: threshold (1 s) left, plus one.
    assert_eq!(r(Phase::Probation, T0, 0).ttl_secs(n, &p), 2);
    // Throttled: the delay ends at 1.5 s, probation a delay (1.5 s) later,
    // allowed a threshold after that: 4 s, plus one.
    assert_eq!(r(Phase::Throttled, T0 + 1500, 1500).ttl_secs(n, &p), 5);
    assert_eq!(r(Phase::Banned, T0 + 10_000, 0).ttl_secs(n, &p), 11);
    // Already past: kept a second; never above memcached's relative limit.
    assert_eq!(r(Phase::Banned, T0 - 5_000, 0).ttl_secs(n, &p), 1);
    assert_eq!(r(Phase::Banned, u64::MAX, 0).ttl_secs(n, &p), MAX_TTL_SECS);
}

#[test]
fn keys_and_instance_names() {
    let v4: IpAddr = "192.0.2.7".parse().unwrap();
    let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
    let net6: IpAddr = "2001:db8::".parse().unwrap();
    assert_eq!(key("web", (v4, 32, 32)), "ipt:web:192.0.2.7");
    assert_eq!(
        key("web", (mapped, 128, 128)),
        "ipt:web:192.0.2.7",
        "one key per client"
    );
    assert_eq!(key("web", (net6, 64, 128)), "ipt:web:2001:db8::/64");
    assert!(valid_instance("my-web_app.1:x"));
    for bad in [
        "",
        "a b",
        "a\tb",
        "ü",
        &"x".repeat(shared::MAX_INSTANCE + 1),
    ] {
        assert!(!valid_instance(bad), "{bad:?}");
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Proxy `p` reads the record (its read may go stale).
    Read(usize),
    /// Proxy `p` finishes its request: compare-and-swap, re-reading and
    /// re-running the update on a lost race.
    Commit(usize),
}

proptest! {
    /// Requests spread over three proxies that share one record through
    /// compare-and-swap, with their reads and writes interleaved, leave the
    /// same shared state and steps as one proxy seeing the requests in commit
    /// order: no violation is lost.
    #[test]
    fn proxies_sharing_a_record_act_as_one(
        ops in proptest::collection::vec((0usize..3, any::<bool>(), 1u64..700), 1..60)
    ) {
        let p = params();
        let mut store = Store::default();
        let mut locals = [IpState::default(); 3];
        let mut pending: [Option<(Option<String>, u64)>; 3] = [None, None, None];
        let mut single = IpState::default();
        let mut t = T0;
        let seq: Vec<(Op, u64)> = ops
            .iter()
            .map(|&(px, read, dt)| (if read { Op::Read(px) } else { Op::Commit(px) }, dt))
            .collect();
        for (op, dt) in seq {
            t += dt;
            let now = now_a(t);
            match op {
                Op::Read(px) => pending[px] = Some(store.gets()),
                Op::Commit(px) => {
                    // Each proxy on its own monotonic clock.
                    let mine = if px == 1 { now_b(t) } else { now };
                    let (mut v, mut ver) = pending[px].take().unwrap_or_else(|| store.gets());
                    let mut tries = 0;
                    let u = loop {
                        let u = request(v.as_deref().map(str::as_bytes), locals[px], mine, &p);
                        if store.cas(ver, &u.write) {
                            break u;
                        }
                        tries += 1;
                        prop_assert!(tries < 3, "a fresh read always wins here");
                        (v, ver) = store.gets();
                    };
                    locals[px] = u.state;
                    if let Step::Delay(_) = u.step {
                        locals[px].undelay();
                    }
                    single.advance(now.mono, &p);
                    let expect = single.request(now.mono, &p);
                    if let Step::Delay(_) = expect {
                        single.undelay();
                    }
                    prop_assert_eq!(u.step, expect);
                    let stored = store.value.as_deref().and_then(|v| Record::decode(v.as_bytes()));
                    prop_assert_eq!(stored, Record::of(&single, now));
                }
            }
        }
    }
}
