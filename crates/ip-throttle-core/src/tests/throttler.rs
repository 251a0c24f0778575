use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use limits::ManualClock;

use super::{MemFiles, MS, S};
use crate::options::EventKind;
use crate::state::Phase;
use crate::throttler::{Action, ListName, Request, Snapshot, Throttler};
use crate::{Client, Options};
use optspec::files::Files;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn at(s: &str) -> Client {
    Client::Addr(ip(s))
}

fn files() -> MemFiles {
    MemFiles::of(&[
        ("/etc/ts/allow.txt", "10.9.0.0/16\n2001:db8:aa::/48\n"),
        ("/etc/ts/deny.txt", "10.0.0.0/8\n192.0.2.66\n"),
    ])
}

const SMALL: &str =
    "--initial-delay=1 --max-delay=4 --threshold=1 --ban-threshold=3 --ban-expiration=3";

fn throttler(args: &str, f: &dyn Files) -> (Throttler<Arc<ManualClock>>, Arc<ManualClock>) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let o = Options::parse(&args, Path::new("/etc/ts"), f).unwrap();
    let clock = Arc::new(ManualClock::new(1000 * S));
    (
        Throttler::new(Snapshot::load(o, f).unwrap(), clock.clone()),
        clock,
    )
}

fn get(addr: &str) -> Request<'static> {
    Request {
        client: ip(addr).into(),
        method: b"GET",
        path: b"/",
    }
}

fn kinds(d: &crate::Decision) -> Vec<EventKind> {
    d.events().map(|e| e.kind).collect()
}

#[test]
fn the_timeline_through_the_throttler() {
    let (t, clock) = throttler(&format!("{SMALL} --max-concurrent=2"), &files());
    let r = get("127.0.0.2");
    let d = t.decide(&r);
    assert_eq!((d.action, kinds(&d)), (Action::Pass, vec![]));
    for want in [1, 2, 4, 4] {
        let d = t.decide(&r);
        assert_eq!(d.action, Action::Delay(want * S));
        assert_eq!(kinds(&d), [EventKind::Throttled]);
        assert!(d.delayed.is_some());
        clock.advance(std::time::Duration::from_nanos(want * S + 10 * MS));
        drop(d); // the delay ended
    }
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Ban])
    );
    let ev = d.events[0].unwrap();
    assert_eq!((ev.phase, ev.violations), (Phase::Banned, 4));
    assert_eq!(d.banned_until, Some(clock.now_nanos() + 3 * S));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Banned])
    );
    assert_eq!(t.show(r.client).unwrap().phase, Phase::Banned);
    clock.advance(std::time::Duration::from_secs(3));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Pass, vec![EventKind::Unban])
    );
    assert_eq!(t.show(r.client).unwrap().phase, Phase::Probation);
}

trait NowNanos {
    fn now_nanos(&self) -> u64;
}

impl NowNanos for Arc<ManualClock> {
    fn now_nanos(&self) -> u64 {
        limits::Clock::now(self)
    }
}

#[test]
fn max_concurrent_answers_too_many_and_frees_on_drop() {
    let (t, _) = throttler(&format!("{SMALL} --max-concurrent=1"), &files());
    let r = get("127.0.0.3");
    t.decide(&r);
    let first = t.decide(&r);
    assert_eq!(first.action, Action::Delay(S));
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::TooMany, vec![EventKind::Concurrent])
    );
    assert_eq!(t.show(r.client).unwrap().delayed, 1);
    drop(first);
    assert_eq!(t.show(r.client).unwrap().delayed, 0);
    assert_eq!(t.decide(&r).action, Action::Delay(4 * S));
}

#[test]
fn allow_list_passes_and_logs_whitelisted() {
    let (t, _) = throttler(
        &format!("{SMALL} --allow-file=allow.txt --deny-file=deny.txt"),
        &files(),
    );
    for _ in 0..10 {
        let d = t.decide(&get("10.9.1.1"));
        assert_eq!(
            (d.action, kinds(&d)),
            (Action::Pass, vec![EventKind::Whitelisted])
        );
    }
    assert!(
        t.show(ip("10.9.1.1")).is_none(),
        "allow-listed IPs hold no state"
    );
    let d = t.decide(&get("2001:db8:aa:1::9"));
    assert_eq!(d.action, Action::Pass);
}

#[test]
fn deny_list_forbids_or_throttles() {
    let (t, _) = throttler(&format!("{SMALL} --deny-file=deny.txt"), &files());
    let d = t.decide(&get("10.1.1.1"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Blacklisted])
    );
    assert!(
        t.show(ip("10.1.1.1")).is_none(),
        "a denied IP holds no state"
    );
    let (t, _) = throttler(
        &format!("{SMALL} --deny-file=deny.txt --deny-action=throttle --default-action=allow"),
        &files(),
    );
    // Not deny-listed, default allow: never throttled.
    for _ in 0..5 {
        assert_eq!(t.decide(&get("127.0.0.5")).action, Action::Pass);
    }
    // Deny-listed with deny-action=throttle: throttled (whatever the scope).
    let r = Request {
        client: at("192.0.2.66"),
        method: b"POST",
        path: b"/anything",
    };
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Pass, vec![EventKind::Blacklisted])
    );
    let d = t.decide(&r);
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Delay(S), vec![EventKind::Blacklisted])
    );
}

#[test]
fn scope_regexes_limit_what_is_throttled_but_a_ban_covers_all() {
    let (t, _) = throttler(
        &format!("{SMALL} --path-regex=^/webapp/ --method-regex=^GET$ --max-concurrent=9"),
        &files(),
    );
    let outside = |m: &'static [u8], p: &'static [u8]| Request {
        client: at("127.0.0.7"),
        method: m,
        path: p,
    };
    for _ in 0..5 {
        assert_eq!(
            t.decide(&outside(b"GET", b"/static/x")).action,
            Action::Pass
        );
        assert_eq!(
            t.decide(&outside(b"POST", b"/webapp/x")).action,
            Action::Pass
        );
    }
    assert!(
        t.show(ip("127.0.0.7")).is_none(),
        "out-of-scope requests create no state"
    );
    let inside = outside(b"GET", b"/webapp/x");
    let steps: Vec<Action> = (0..6).map(|_| t.decide(&inside).action).collect();
    assert_eq!(
        steps,
        [
            Action::Pass,
            Action::Delay(S),
            Action::Delay(2 * S),
            Action::Delay(4 * S),
            Action::Delay(4 * S),
            Action::Forbid
        ]
    );
    let d = t.decide(&outside(b"GET", b"/static/x"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Forbid, vec![EventKind::Banned])
    );
}

#[test]
fn log_only_decides_and_logs_but_always_passes() {
    let (t, _) = throttler(
        &format!("{SMALL} --max-concurrent=9 --log-only --deny-file=deny.txt"),
        &files(),
    );
    let d = t.decide(&get("10.1.1.1"));
    assert_eq!((d.action, d.would), (Action::Pass, Action::Forbid));
    let r = get("127.0.0.8");
    let mut seen = Vec::new();
    let mut held = Vec::new();
    for _ in 0..7 {
        let mut d = t.decide(&r);
        assert_eq!(d.action, Action::Pass);
        seen.push((d.would, kinds(&d)));
        held.extend(d.delayed.take());
    }
    use EventKind::*;
    assert_eq!(
        seen,
        [
            (Action::Pass, vec![]),
            (Action::Delay(S), vec![Throttled]),
            (Action::Delay(2 * S), vec![Throttled]),
            (Action::Delay(4 * S), vec![Throttled]),
            (Action::Delay(4 * S), vec![Throttled]),
            (Action::Forbid, vec![Ban]),
            (Action::Forbid, vec![Banned]),
        ]
    );
    assert_eq!(t.show(r.client).unwrap().delayed, 4);
    drop(held);
    assert_eq!(t.show(r.client).unwrap().delayed, 0);
}

#[test]
fn unban_show_and_expire() {
    let (t, clock) = throttler(
        &format!("{SMALL} --ban-threshold=1 --max-concurrent=9"),
        &files(),
    );
    let r = get("127.0.0.9");
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    let key = d[3].key;
    assert_eq!(t.expire(key), None, "not expired yet");
    let v = t.show(r.client).unwrap();
    assert_eq!((v.phase, v.remaining), (Phase::Banned, 3 * S));
    let e = t.unban(r.client).unwrap();
    assert_eq!((e.kind, e.phase), (EventKind::Unban, Phase::Allowed));
    assert_eq!(t.unban(r.client), None);
    assert_eq!(t.decide(&r).action, Action::Pass);
    // Banned again, then the timer's expire() at the deadline.
    let d: Vec<_> = (0..3).map(|_| t.decide(&r)).collect();
    assert_eq!(d[2].action, Action::Forbid);
    clock.advance(std::time::Duration::from_secs(3));
    assert_eq!(t.expire(d[2].key).map(|e| e.kind), Some(EventKind::Unban));
    assert_eq!(t.expire(d[2].key), None, "logged once");
    assert!(t.show(ip("127.0.0.99")).is_none());
}

#[test]
fn ipv6_clients_share_state_per_64() {
    let (t, _) = throttler(&format!("{SMALL} --max-concurrent=9"), &files());
    assert_eq!(t.decide(&get("2001:db8:1:2::1")).action, Action::Pass);
    assert_eq!(
        t.decide(&get("2001:db8:1:2:ffff::7")).action,
        Action::Delay(S)
    );
    assert_eq!(t.decide(&get("2001:db8:1:3::1")).action, Action::Pass);
    // IPv4-mapped addresses are the IPv4 client.
    assert_eq!(t.decide(&get("127.0.0.10")).action, Action::Pass);
    assert_eq!(t.decide(&get("::ffff:127.0.0.10")).action, Action::Delay(S));
}

#[test]
fn a_full_table_of_busy_ips_passes_new_ones_untracked() {
    let (t, _) = throttler(&format!("{SMALL} --keys=2 --max-concurrent=9"), &files());
    let mut held = Vec::new();
    for a in ["127.0.1.1", "127.0.1.2"] {
        t.decide(&get(a));
        held.push(t.decide(&get(a)));
    }
    let d = t.decide(&get("127.0.1.3"));
    assert!(d.untracked);
    assert_eq!(d.action, Action::Pass);
    drop(held);
    // Idle IPs are evicted to make room (and forgotten: allowed again).
    let d = t.decide(&get("127.0.1.3"));
    assert!(!d.untracked);
}

#[test]
fn reloads_swap_lists_and_options_and_keep_state() {
    let mut f = files();
    let (t, _) = throttler(
        &format!("{SMALL} --deny-file=deny.txt --max-concurrent=9"),
        &f,
    );
    let r = get("127.0.0.11");
    t.decide(&r);
    assert_eq!(t.decide(&r).action, Action::Delay(S));
    assert_eq!(t.decide(&get("10.1.1.1")).action, Action::Forbid);
    f.insert("/etc/ts/deny.txt", "127.0.0.11\n");
    assert_eq!(t.reload_list(ListName::Deny, &f), Ok(1));
    assert_eq!(t.decide(&get("10.1.1.1")).action, Action::Pass);
    assert_eq!(t.decide(&r).action, Action::Forbid);
    assert_eq!(
        t.reload_list(ListName::Allow, &f),
        Err("no --allow-file is configured".into())
    );
    f.insert("/etc/ts/deny.txt", "300.0.0.1\n");
    let e = t.reload_list(ListName::Deny, &f).unwrap_err();
    assert!(
        e.starts_with("--deny-file: /etc/ts/deny.txt:1: '300.0.0.1'"),
        "{e}"
    );
    assert_eq!(
        t.decide(&r).action,
        Action::Forbid,
        "a failed reload keeps the old list"
    );
    // Options: the state survives, the new delays apply.
    let o = Options::parse(
        &["--initial-delay=2", "--max-delay=8", "--max-concurrent=9"],
        Path::new("/etc/ts"),
        &f,
    )
    .unwrap();
    t.reload(o, &f).unwrap();
    assert_eq!(
        t.decide(&r).action,
        Action::Delay(2 * S),
        "state kept: 1 s doubled"
    );
    let o = Options::parse(&["--keys=7"], Path::new("/etc/ts"), &f).unwrap();
    assert!(t
        .reload(o, &f)
        .unwrap_err()
        .starts_with("--keys and --key-prefix cannot change"));
}

#[test]
fn a_timer_a_hair_early_ends_only_the_ban_it_was_armed_for() {
    let (t, clock) = throttler(
        &format!("{SMALL} --ban-threshold=1 --max-concurrent=9"),
        &files(),
    );
    let r = get("127.0.0.9");
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    let key = d[3].key;
    let ends = limits::Clock::now(&clock) + 3 * S;
    // 2 ms before the end, a timer armed for it ends the ban.
    clock.advance(std::time::Duration::from_millis(2998));
    assert_eq!(t.expire(key), None, "the real clock says not yet");
    assert_eq!(
        t.expire_by(key, ends).map(|e| e.kind),
        Some(EventKind::Unban)
    );
    // Banned again: a timer armed for the old end does not end the new ban.
    let d: Vec<_> = (0..4).map(|_| t.decide(&r)).collect();
    assert_eq!(d[3].action, Action::Forbid);
    assert_eq!(t.expire_by(key, ends), None);
    assert_eq!(t.show(r.client).map(|v| v.phase), Some(Phase::Banned));
}

/// Two proxies' throttlers sharing one record (a store modelled as a cell):
/// each request runs `scope`, then the shared step, then adopts it.
mod shared_store {
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
}

/// A request from `remote` with an `X-Forwarded-For` of `xff` (if any), as
/// the plugin builds it: the client is resolved under the rule's options.
fn forwarded(t: &Throttler<Arc<ManualClock>>, remote: &str, xff: Option<&str>) -> Request<'static> {
    let read = |name: &str| {
        assert_eq!(name, "X-Forwarded-For");
        xff.map(|v| v.as_bytes().to_vec())
    };
    Request {
        client: t.client_ip(ip(remote), read),
        method: b"GET",
        path: b"/",
    }
}

/// Behind a trusted balancer, the state machine, bans and the lists apply
/// to the client it forwards for: the abuser is banned, another client
/// behind the same balancer is not, and entries the client wrote itself
/// change nothing.
#[test]
fn behind_a_trusted_proxy_the_client_is_throttled_not_the_proxy() {
    let (t, _) = throttler(
        &format!("{SMALL} --max-concurrent=9 --deny-file=deny.txt --trusted-proxies=127.0.0.9"),
        &files(),
    );
    let lb = "127.0.0.9";
    let abuser = forwarded(&t, lb, Some("198.51.100.1"));
    assert_eq!(abuser.client, at("198.51.100.1"));
    let actions: Vec<Action> = (0..6).map(|_| t.decide(&abuser).action).collect();
    assert_eq!(
        actions,
        [
            Action::Pass,
            Action::Delay(S),
            Action::Delay(2 * S),
            Action::Delay(4 * S),
            Action::Delay(4 * S),
            Action::Forbid
        ]
    );
    let other = forwarded(&t, lb, Some("198.51.100.2"));
    assert_eq!(t.decide(&other).action, Action::Pass);
    // The abuser claiming to be the other client: the balancer appended
    // the real address, which is the one that counts.
    let spoof = forwarded(&t, lb, Some("198.51.100.2, 198.51.100.1"));
    assert_eq!(spoof.client, at("198.51.100.1"));
    assert_eq!(t.decide(&spoof).action, Action::Forbid);
    // A request the balancer names no client for is not the balancer's,
    // and an untrusted remote's header is not read.
    assert_eq!(forwarded(&t, lb, None).client, Client::Unknown);
    assert_eq!(t.show(ip(lb)), None, "the balancer has no state");
    let direct = forwarded(&t, "127.0.0.8", Some("198.51.100.1"));
    assert_eq!(direct.client, at("127.0.0.8"));
    assert_eq!(t.decide(&direct).action, Action::Pass);
    // The deny list holds 10.0.0.0/8: it applies to the forwarded client.
    assert_eq!(
        t.decide(&forwarded(&t, lb, Some("10.1.2.3"))).action,
        Action::Forbid
    );
}

/// A client a trusted balancer does not name: on neither list (here the
/// balancers' networks are on them), one state for every such client, and
/// never the balancer's.
#[test]
fn an_unknown_client_behind_a_trusted_proxy_is_on_no_list_and_keyed_apart() {
    // 10.9.0.0/16 is allowed and 10.0.0.0/8 denied: a balancer in each.
    let (t, _) = throttler(
        &format!(
            "{SMALL} --max-concurrent=9 --allow-file=allow.txt --deny-file=deny.txt \
             --trusted-proxies=10.0.0.0/8"
        ),
        &files(),
    );
    let (allowed_lb, denied_lb) = ("10.9.0.9", "10.1.1.1");
    for lb in [allowed_lb, denied_lb] {
        for xff in [None, Some("unknown"), Some("_hidden"), Some("6.6.6.6, bad")] {
            let r = forwarded(&t, lb, xff);
            assert_eq!(r.client, Client::Unknown, "{lb} {xff:?}");
            assert_ne!(t.key(r.client), t.key(ip(lb)));
        }
    }
    // Not whitelisted nor blacklisted: throttled by --default-action, all
    // of them as one client, through either balancer.
    let from = |lb: &str, xff: Option<&str>| t.decide(&forwarded(&t, lb, xff));
    let d = from(allowed_lb, Some("unknown"));
    assert_eq!((d.action, kinds(&d)), (Action::Pass, vec![]));
    let d = from(denied_lb, Some("_hidden"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Delay(S), vec![EventKind::Throttled])
    );
    let d = from(allowed_lb, None);
    assert_eq!(d.action, Action::Delay(2 * S));
    drop(d);
    assert_eq!(t.show(Client::Unknown).map(|v| v.delay), Some(2 * S));
    assert_eq!(t.show(ip(allowed_lb)), None, "the balancer has no state");
    assert_eq!(t.show(ip(denied_lb)), None, "the balancer has no state");
    // Clients the balancers name are theirs: listed as their addresses are.
    let d = from(denied_lb, Some("10.9.5.5"));
    assert_eq!(kinds(&d), [EventKind::Whitelisted]);
    let d = from(allowed_lb, Some("10.1.2.3"));
    assert_eq!(d.action, Action::Forbid);
    // Banned together, and unbanned by name.
    for _ in 0..3 {
        from(denied_lb, Some("unknown"));
    }
    assert_eq!(from(allowed_lb, None).action, Action::Forbid);
    assert_eq!(from(allowed_lb, Some("192.0.2.1")).action, Action::Pass);
    assert!(t.unban(Client::Unknown).is_some());
    assert_eq!(from(allowed_lb, Some("unknown")).action, Action::Pass);
}

/// `reload config` can start or stop trusting proxies.
#[test]
fn a_reload_changes_who_is_trusted() {
    let f = files();
    let (t, _) = throttler(&format!("{SMALL} --trusted-proxies=127.0.0.9"), &f);
    assert_eq!(
        forwarded(&t, "127.0.0.9", Some("198.51.100.1")).client,
        at("198.51.100.1")
    );
    let o = Options::parse(&[], Path::new("/etc/ts"), &f).unwrap();
    t.reload(o, &f).unwrap();
    assert_eq!(
        forwarded(&t, "127.0.0.9", Some("198.51.100.1")).client,
        at("127.0.0.9")
    );
}
