//! `keys`: the hottest IPs in their documented order, each named by what
//! its state is kept for, found with a heap of at most N.

use std::net::Ipv4Addr;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::throttler::{Best, Held};

fn no_lists() -> MemFiles {
    MemFiles::of(&[])
}

/// `n` requests of `client` at the clock's time, their delays ended.
fn send(t: &Throttler<Arc<ManualClock>>, client: Client, n: usize) {
    for _ in 0..n {
        t.decide(&Request {
            client,
            method: b"GET",
            path: b"/",
        });
    }
}

fn names(top: &[Held]) -> Vec<String> {
    top.iter().map(|h| h.client.to_string()).collect()
}

#[test]
fn banned_first_then_throttled_then_probation_ties_by_address() {
    let (t, clock) = throttler(SMALL, &no_lists());
    // Its probation ends before the others start: allowed, left out.
    send(&t, at("198.51.100.99"), 1);
    clock.advance(Duration::from_secs(2));
    // Six requests: pass, then violations 0 to 3, then 4 > 3 bans.
    send(&t, at("198.51.100.1"), 6);
    clock.advance(Duration::from_millis(500));
    send(&t, at("198.51.100.2"), 6); // banned later: more of it left
    send(&t, at("198.51.100.3"), 4); // throttled, 2 violations
    send(&t, at("198.51.100.4"), 2); // throttled, none
    for c in ["198.51.100.6", "198.51.100.5", "2001:db8::1"] {
        send(&t, at(c), 1); // probation, all as long
    }
    send(&t, Client::Unknown, 1);

    let top = t.top(20);
    assert_eq!(
        names(&top),
        [
            "198.51.100.2",
            "198.51.100.1",
            "198.51.100.3",
            "198.51.100.4",
            "198.51.100.5",
            "198.51.100.6",
            "2001:db8::",
            "unknown",
        ]
    );
    let v: Vec<(Phase, u32, u64)> = top
        .iter()
        .map(|h| (h.view.phase, h.view.violations, h.view.remaining))
        .collect();
    assert_eq!(v[0], (Phase::Banned, 4, 3 * S));
    assert_eq!(v[1], (Phase::Banned, 4, 3 * S - 500 * MS));
    assert_eq!((v[2].0, v[2].1), (Phase::Throttled, 2));
    assert_eq!(top[2].view.delay, 4 * S);
    assert_eq!((v[3].0, v[3].1), (Phase::Throttled, 0));
    assert_eq!(v[4], (Phase::Probation, 0, S));
    // Each as `show` sees it, with its prefix (the IPv6 default is /64).
    for h in &top {
        assert_eq!(t.show(h.client), Some(h.view), "{}", h.client);
    }
    let prefixes: Vec<Option<u8>> = top.iter().map(|h| h.prefix).collect();
    assert_eq!(prefixes[6..], [Some(64), None]);
    assert!(prefixes[..6].iter().all(|p| *p == Some(32)));

    assert_eq!(names(&t.top(3)), names(&top[..3]));
    // Once the bans end, and the shorter throttling and the probations,
    // only the longest throttled IP is left (until 8 s after its first delay).
    clock.advance(Duration::from_secs(3));
    assert_eq!(names(&t.top(20)), ["198.51.100.3"]);
}

#[test]
fn ips_are_named_by_their_prefix() {
    let (t, _) = throttler(&format!("{SMALL} --key-prefix=24/48"), &no_lists());
    send(&t, at("192.0.2.77"), 1);
    send(&t, at("::ffff:198.51.100.9"), 2); // IPv4-mapped: IPv4
    send(&t, at("2001:db8:1:2::3"), 1);
    let top = t.top(5);
    let got: Vec<(String, Option<u8>)> = top
        .iter()
        .map(|h| (h.client.to_string(), h.prefix))
        .collect();
    assert_eq!(
        got,
        [
            ("198.51.100.0".to_owned(), Some(24)),
            ("192.0.2.0".to_owned(), Some(24)),
            ("2001:db8:1::".to_owned(), Some(48)),
        ]
    );
    // The name shown is an address `show` takes back.
    assert_eq!(t.show(top[0].client), Some(top[0].view));
}

#[test]
fn a_full_table_gives_the_n_smallest_addresses_of_equals() {
    let (t, _) = throttler(SMALL, &no_lists());
    for i in (0..300u32).rev() {
        send(&t, Client::Addr(Ipv4Addr::from(0xc633_6400 + i).into()), 1);
    }
    let top = t.top(10);
    let want: Vec<String> = (0..10u32)
        .map(|i| Ipv4Addr::from(0xc633_6400 + i).to_string())
        .collect();
    assert_eq!(names(&top), want);
    assert_eq!(t.top(1000).len(), 300);
}

#[test]
fn best_keeps_the_greatest_n_in_order() {
    let mut b = Best::new(3);
    assert!(b.is_empty());
    for x in [5, 1, 9, 7, 3, 9, 2] {
        b.push(x);
        assert!(b.len() <= 3);
    }
    assert_eq!(b.into_sorted(), [9, 9, 7]);
    let mut none = Best::new(0);
    none.push(1);
    assert_eq!(none.into_sorted(), Vec::<i32>::new());
}

proptest! {
    #[test]
    fn best_is_the_head_of_the_sorted_items(items in proptest::collection::vec(any::<u16>(), 0..200), n in 0usize..50) {
        let mut b = Best::new(n);
        for &x in &items {
            b.push(x);
            prop_assert!(b.len() <= n);
        }
        let mut sorted = items.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.truncate(n);
        prop_assert_eq!(b.into_sorted(), sorted);
    }
}
