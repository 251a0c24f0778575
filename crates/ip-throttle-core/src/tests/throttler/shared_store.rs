//! Two proxies' throttlers sharing one record (a store modelled as a cell):
//! each request runs `scope`, then the shared step, then adopts it.

use super::*;
use crate::shared::{self, Write};
use crate::throttler::{Machine, Scope};
use limits::Clock;

struct Cell(Option<String>);

fn through(
    t: &Throttler<Arc<ManualClock>>,
    store: &mut Cell,
    r: &Request<'_>,
    wall_ms: u64,
) -> crate::Decision {
    let m = match t.scope(r) {
        Scope::Decided(d) => return d,
        Scope::Machine(m) => m,
    };
    let (local, now, p, reserved) = t.reserve(&m, wall_ms);
    let u = shared::request(store.0.as_deref().map(str::as_bytes), local, now, &p);
    match &u.write {
        Write::Keep => {}
        Write::Set { value, .. } => store.0 = Some(value.clone()),
        Write::Delete => store.0 = None,
    }
    t.step(
        m,
        Machine::Shared {
            update: &u,
            reserved,
        },
    )
}

/// Requests of one IP all sent to the store before any answer comes
/// back still count against `--max-concurrent`: each reserved its place.
#[test]
fn requests_in_flight_to_the_store_count_against_max_concurrent() {
    let f = files();
    let (t, clock) = throttler(&format!("{SMALL} --max-concurrent=1"), &f);
    let mut store = Cell(None);
    let r = get("127.0.0.4");
    let wall = |c: &ManualClock| 1_700_000_000_000 + c.now() / MS;
    assert_eq!(
        through(&t, &mut store, &r, wall(&clock)).action,
        Action::Pass
    );
    // Five sent at once: all reserve before the first answer.
    let sent: Vec<_> = (0..5)
        .map(|_| {
            let Scope::Machine(m) = t.scope(&r) else {
                panic!("left to the state machine")
            };
            let (local, now, p, reserved) = t.reserve(&m, wall(&clock));
            (m, local, now, p, reserved)
        })
        .collect();
    let mut actions = Vec::new();
    for (m, local, now, p, reserved) in sent {
        let u = shared::request(store.0.as_deref().map(str::as_bytes), local, now, &p);
        if let Write::Set { value, .. } = &u.write {
            store.0 = Some(value.clone());
        }
        let d = t.step(
            m,
            Machine::Shared {
                update: &u,
                reserved,
            },
        );
        actions.push(d.action);
        // Held delays stay counted; the rest gave their place back.
        std::mem::forget(d);
    }
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(a, Action::Delay(_)))
            .count(),
        1,
        "{actions:?}"
    );
    assert_eq!(t.show(ip("127.0.0.4")).map(|v| v.delayed), Some(1));
}

/// The record is the IP's prefix under --key-prefix (an IPv6 client
/// owns its /64), like the local state.
#[test]
fn records_are_kept_per_key_prefix() {
    let f = files();
    let (t, _) = throttler("--key-prefix=24/64 --instance=w", &f);
    assert_eq!(
        t.record_key(ip("2001:db8:1:2::1")),
        "ipt:w:2001:db8:1:2::/64"
    );
    assert_eq!(
        t.record_key(ip("2001:db8:1:2:ffff::9")),
        "ipt:w:2001:db8:1:2::/64"
    );
    assert_eq!(t.record_key(ip("192.0.2.77")), "ipt:w:192.0.2.0/24");
    assert_eq!(t.record_key(ip("::ffff:192.0.2.77")), "ipt:w:192.0.2.0/24");
    let (full, _) = throttler("--key-prefix=32/128 --instance=w", &f);
    assert_eq!(full.record_key(ip("192.0.2.77")), "ipt:w:192.0.2.77");
    assert_eq!(full.record_key(ip("2001:db8::1")), "ipt:w:2001:db8::1");
    // Every unknown client shares one record, which no address has.
    assert_eq!(t.record_key(Client::Unknown), "ipt:w:unknown");
    assert_eq!(full.record_key(Client::Unknown), "ipt:w:unknown");
}

#[test]
fn a_ban_earned_through_one_proxy_is_enforced_and_ended_by_the_other() {
    let f = files();
    let (a, clock_a) = throttler(SMALL, &f);
    let (b, clock_b) = throttler(SMALL, &f);
    let mut store = Cell(None);
    let r = get("127.0.0.2");
    let wall = |c: &ManualClock| 1_700_000_000_000 + c.now() / MS;
    let mut got = Vec::new();
    for _ in 0..6 {
        let d = through(&a, &mut store, &r, wall(&clock_a));
        got.push((d.action, kinds(&d)));
    }
    assert_eq!(got[0], (Action::Pass, vec![]));
    assert_eq!(got[1], (Action::Delay(S), vec![EventKind::Throttled]));
    assert_eq!(got[5], (Action::Forbid, vec![EventKind::Ban]));
    // B has never seen the IP: the record refuses it, B logs `banned`
    // and arms its own unban once.
    let d = through(&b, &mut store, &r, wall(&clock_b));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Banned])
    );
    assert!(d.banned_until.is_some(), "the first refusal arms B's unban");
    let d = through(&b, &mut store, &r, wall(&clock_b));
    assert!(d.banned_until.is_none(), "once per ban");
    assert_eq!(
        b.show(ip("127.0.0.2")).map(|v| v.phase),
        Some(Phase::Banned)
    );
    // Each proxy's `keys` names the IP it stepped on the record.
    for t in [&a, &b] {
        let top = t.top(5);
        assert_eq!(top.len(), 1);
        assert_eq!(
            (top[0].client, top[0].view.phase),
            (at("127.0.0.2"), Phase::Banned)
        );
    }
    // After the ban (3 s) B lets it in and logs the unban.
    clock_b.advance(std::time::Duration::from_secs(3));
    let d = through(&b, &mut store, &r, wall(&clock_b));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Pass, vec![EventKind::Unban])
    );
}

#[test]
fn delays_count_against_max_concurrent_per_proxy() {
    let f = files();
    let args = format!("{SMALL} --max-concurrent=1");
    let (a, clock_a) = throttler(&args, &f);
    let (b, clock_b) = throttler(&args, &f);
    let mut store = Cell(None);
    let r = get("127.0.0.3");
    let wall = |c: &ManualClock| 1_700_000_000_000 + c.now() / MS;
    assert_eq!(
        through(&a, &mut store, &r, wall(&clock_a)).action,
        Action::Pass
    );
    let held_a = through(&a, &mut store, &r, wall(&clock_a));
    assert_eq!(held_a.action, Action::Delay(S));
    // A holds its one delayed request; B's own count is still 0, so B
    // delays (by the doubled, shared delay) rather than refusing.
    let held_b = through(&b, &mut store, &r, wall(&clock_b));
    assert_eq!(held_b.action, Action::Delay(2 * S));
    // A second one on A is over A's --max-concurrent.
    assert_eq!(
        through(&a, &mut store, &r, wall(&clock_a)).action,
        Action::TooMany
    );
    drop(held_a);
    // The shared record kept every violation: 0, 1 (B), 2 (A's refused one).
    let v = a.show(ip("127.0.0.3")).expect("tracked");
    assert_eq!((v.violations, v.delay), (2, 4 * S));
}
