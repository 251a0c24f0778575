use std::net::IpAddr;

use crate::lists::{CidrList, Listed, Lists};
use std::sync::Arc;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn parses_addresses_cidrs_and_comments() {
    let l = crate::lists::parse(
        "# office\n10.0.0.0/8\n192.0.2.7 # one host\n\n  2001:db8::/32  \n::ffff:198.51.100.0/120\n10.1.2.3/8\n",
        "allow.txt",
    )
    .unwrap();
    // 10.1.2.3/8 is 10.0.0.0/8 again.
    assert_eq!(l.len(), 4);
    assert_eq!(l.longest(ip("10.200.1.1")), Some(8));
    assert_eq!(l.longest(ip("192.0.2.7")), Some(32));
    assert!(!l.contains(ip("192.0.2.8")));
    assert_eq!(l.longest(ip("2001:db8:1::5")), Some(32));
    assert!(!l.contains(ip("2001:db9::1")));
    // The mapped prefix is the IPv4 /24.
    assert_eq!(l.longest(ip("198.51.100.9")), Some(24));
}

#[test]
fn a_bad_line_names_file_and_line() {
    let e = crate::lists::parse("10.0.0.0/8\n# ok\n10.0.0.0/33\n", "/etc/ts/deny.txt").unwrap_err();
    assert_eq!(
        e,
        "/etc/ts/deny.txt:3: '10.0.0.0/33' is not an IP address or CIDR (one per line, e.g. \
         192.0.2.0/24, 2001:db8::/32 or 198.51.100.7; # starts a comment)"
    );
    assert!(crate::lists::parse("example.com\n", "f")
        .unwrap_err()
        .starts_with("f:1: 'example.com'"));
}

#[test]
fn any_allow_match_wins_over_any_deny_match() {
    let lists = Lists {
        allow: Arc::new(
            crate::lists::parse("10.0.0.0/8\n172.16.0.0/12\n2001:db8::/32\n", "a").unwrap(),
        ),
        deny: Arc::new(
            crate::lists::parse(
                "10.1.2.3\n172.16.0.0/12\n172.16.5.0/24\n192.0.2.0/24\n2001:db8::1\n",
                "d",
            )
            .unwrap(),
        ),
    };
    // A deny entry more specific than the allow entry does not win.
    assert_eq!(lists.classify(ip("10.1.2.3")), Listed::Allow);
    assert_eq!(lists.classify(ip("172.16.5.1")), Listed::Allow);
    assert_eq!(lists.classify(ip("172.16.9.1")), Listed::Allow);
    assert_eq!(lists.classify(ip("2001:db8::1")), Listed::Allow);
    assert_eq!(lists.classify(ip("192.0.2.1")), Listed::Deny);
    assert_eq!(lists.classify(ip("198.51.100.1")), Listed::Neither);
    assert_eq!(lists.classify(ip("::1")), Listed::Neither);
}

fn v4net(a: u32, len: u8) -> ipnet::IpNet {
    ipnet::IpNet::V4(ipnet::Ipv4Net::new(a.into(), len).unwrap().trunc())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Whatever the prefix lengths, an address on the allow list is Allow;
    /// otherwise on the deny list it is Deny; else Neither.
    #[test]
    fn allow_always_wins(
        allow in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32), 0..20),
        deny in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32), 0..20),
        probes in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..20),
    ) {
        let mut a = CidrList::new();
        let mut d = CidrList::new();
        allow.iter().for_each(|&(x, l)| a.insert(v4net(x, l)));
        deny.iter().for_each(|&(x, l)| d.insert(v4net(x, l)));
        let within = |nets: &[(u32, u8)], p: u32| {
            nets.iter().any(|&(x, l)| {
                let m = u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0);
                p & m == x & m
            })
        };
        let lists = Lists { allow: Arc::new(a), deny: Arc::new(d) };
        // Probes include addresses inside each deny entry, so the
        // allow-and-deny case is exercised.
        for p in probes.iter().copied().chain(deny.iter().map(|&(x, _)| x)) {
            let want = if within(&allow, p) {
                Listed::Allow
            } else if within(&deny, p) {
                Listed::Deny
            } else {
                Listed::Neither
            };
            proptest::prop_assert_eq!(lists.classify(IpAddr::V4(p.into())), want);
        }
    }
}

/// The trie against a linear scan, on random prefixes.
#[test]
fn trie_matches_a_linear_scan() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut list = CidrList::new();
    let mut nets = Vec::new();
    for _ in 0..2000 {
        let len = (next() % 33) as u8;
        let a = (next() as u32) & (u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0));
        nets.push((a, len));
        list.insert(ipnet::IpNet::V4(
            ipnet::Ipv4Net::new(a.into(), len).unwrap(),
        ));
    }
    for _ in 0..20_000 {
        let probe = next() as u32;
        let want = nets
            .iter()
            .filter(|(a, l)| {
                let m = u32::MAX.checked_shl(32 - u32::from(*l)).unwrap_or(0);
                probe & m == *a
            })
            .map(|(_, l)| *l)
            .max();
        assert_eq!(list.longest(IpAddr::V4(probe.into())), want);
    }
}
