use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

/// A request with a remote address and raw header fields.
#[derive(Default)]
struct Req {
    remote: Option<IpAddr>,
    headers: Vec<(&'static str, Vec<u8>)>,
    query: Option<Vec<u8>>,
    /// `resolved_client`'s answer.
    resolved: Option<Option<Client>>,
    /// Header reads so far.
    reads: std::cell::Cell<u32>,
}

impl Req {
    fn from(remote: &str) -> Req {
        Req {
            remote: remote.parse().ok(),
            ..Req::default()
        }
    }

    fn with(mut self, name: &'static str, value: &str) -> Req {
        self.headers.push((name, value.as_bytes().to_vec()));
        self
    }
}

impl RequestView for Req {
    fn remote_ip(&self) -> Option<IpAddr> {
        self.remote
    }

    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.reads.set(self.reads.get() + 1);
        let values: Vec<&[u8]> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect();
        (!values.is_empty()).then(|| values.join(&b", "[..]))
    }

    fn query(&self) -> Option<Vec<u8>> {
        self.query.clone()
    }

    fn resolved_client(&self) -> Option<Option<Client>> {
        self.resolved
    }
}

#[test]
fn an_ip_key_uses_the_client_already_resolved() {
    let s = spec("ip", "10.0.0.1");
    let behind = || Req::from("10.0.0.1").with("X-Forwarded-For", "192.0.2.7");
    // Walked once here.
    let walked = behind();
    let k = key(&s, &walked);
    assert_eq!(walked.reads.get(), 1);
    // Found before (--exempt): the same key, no header read.
    let hinted = Req {
        resolved: Some(ip("192.0.2.7")),
        ..behind()
    };
    assert_eq!(key(&s, &hinted), k);
    assert_eq!(hinted.reads.get(), 0);
    // Found to be unknown: no key, as without the hint.
    let none = Req {
        resolved: Some(None),
        ..Req::default()
    };
    assert_eq!(key(&s, &none), None);
}

fn spec(key: &str, trusted: &str) -> KeySpec {
    KeySpec {
        sources: KeySpec::parse_sources(key).unwrap(),
        v4_prefix: 32,
        v6_prefix: 64,
        proxies: TrustedProxies {
            trusted: if trusted.is_empty() {
                Vec::new()
            } else {
                KeySpec::parse_trusted(trusted).unwrap()
            },
            forwarded: ForwardedHeader::XForwardedFor,
        },
    }
}

fn key(s: &KeySpec, r: &Req) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    s.key(r, &mut out).then_some(out)
}

fn ip(s: &str) -> Option<Client> {
    s.parse().ok().map(Client::Addr)
}

#[test]
fn sources_parse_and_bad_ones_are_named() {
    assert_eq!(
        KeySpec::parse_sources("ip,header:X-User,cookie:sid,query:api_key").unwrap(),
        vec![
            Source::Ip,
            Source::Header("X-User".into()),
            Source::Cookie("sid".into()),
            Source::Query("api_key".into())
        ]
    );
    let e = KeySpec::parse_sources("ip,host").unwrap_err();
    assert!(e.starts_with("'host' is not a key source"), "{e}");
    assert!(KeySpec::parse_sources("header:").is_err());
    assert!(KeySpec::parse_sources("header:a b").is_err());
    assert!(KeySpec::parse_sources("ip,ip")
        .unwrap_err()
        .contains("twice"));
    assert_eq!(KeySpec::parse_prefix("24/48"), Some((24, 48)));
    assert_eq!(KeySpec::parse_prefix("33/64"), None);
    assert_eq!(KeySpec::parse_prefix("32/129"), None);
    assert!(KeySpec::parse_trusted("10.0.0.0/8, 127.0.0.1,::1").is_ok());
    let e = KeySpec::parse_trusted("10.0.0.0/33").unwrap_err();
    assert!(e.starts_with("'10.0.0.0/33' is not"), "{e}");
}

#[test]
fn addresses_aggregate_by_prefix() {
    let mut s = spec("ip", "");
    let a = key(&s, &Req::from("2001:db8:1:2:aaaa::1"));
    let b = key(&s, &Req::from("2001:db8:1:2:bbbb::9"));
    let c = key(&s, &Req::from("2001:db8:1:3::1"));
    assert_eq!(a, b, "one /64 is one client");
    assert_ne!(a, c);
    assert_ne!(
        key(&s, &Req::from("10.0.0.1")),
        key(&s, &Req::from("10.0.0.2"))
    );
    s.v4_prefix = 24;
    assert_eq!(
        key(&s, &Req::from("10.0.0.1")),
        key(&s, &Req::from("10.0.0.200"))
    );
    assert_ne!(
        key(&s, &Req::from("10.0.0.1")),
        key(&s, &Req::from("10.0.1.1"))
    );
    // A dual-stack socket's mapped address is the IPv4 client.
    assert_eq!(
        key(&s, &Req::from("::ffff:10.0.0.7")),
        key(&s, &Req::from("10.0.0.7"))
    );
    s.v4_prefix = 0;
    assert_eq!(
        key(&s, &Req::from("1.2.3.4")),
        key(&s, &Req::from("9.9.9.9"))
    );
}

#[test]
fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
    let s = spec("ip", "10.0.0.0/8");
    // Untrusted remote: its own address, whatever it claims.
    let r = Req::from("192.0.2.1").with("X-Forwarded-For", "198.51.100.7");
    assert_eq!(s.proxies.client_ip(&r), ip("192.0.2.1"));
    // Trusted load balancer: the right-most address it did not add itself.
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", "198.51.100.7");
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.7"));
    // A spoofed left-most entry is never believed.
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", "6.6.6.6, 198.51.100.7");
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.7"));
    // Chains of trusted proxies are walked from the right; several fields join.
    let r = Req::from("10.1.1.1")
        .with("X-Forwarded-For", "6.6.6.6, 198.51.100.7")
        .with("X-Forwarded-For", "10.2.2.2");
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.7"));
    // Ports and brackets.
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", "[2001:db8::5]:443");
    assert_eq!(s.proxies.client_ip(&r), ip("2001:db8::5"));
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", "198.51.100.7:5555");
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.7"));
    // Garbage first: the client is unknown (never the proxy itself).
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", "6.6.6.6, nonsense");
    assert_eq!(s.proxies.client_ip(&r), Some(Client::Unknown));
    // A proxy that writes X-Forwarded-For passes a client's Forwarded through:
    // it is never read.
    let r = Req::from("10.1.1.1").with("Forwarded", "for=6.6.6.6");
    assert_eq!(s.proxies.client_ip(&r), Some(Client::Unknown));
    // RFC 7239, for proxies that write it; then a client's X-Forwarded-For is ignored.
    let mut s7239 = s.clone();
    s7239.proxies.forwarded = ForwardedHeader::Forwarded;
    let r = Req::from("10.1.1.1")
        .with("X-Forwarded-For", "6.6.6.6")
        .with(
            "Forwarded",
            "for=6.6.6.6, for=\"[2001:db8::9]:80\";proto=https;by=10.1.1.1",
        );
    assert_eq!(s7239.proxies.client_ip(&r), ip("2001:db8::9"));
    // Trusted remote without a chain: unknown.
    assert_eq!(
        s.proxies.client_ip(&Req::from("10.1.1.1")),
        Some(Client::Unknown)
    );
}

/// A client its trusted proxy does not name has one key of its own: shared
/// by every such client, apart from the proxy's address (and any other),
/// and a key all the same (not --key-missing).
#[test]
fn an_unknown_client_behind_a_trusted_proxy_keys_apart_from_the_proxy() {
    let s = spec("ip", "10.0.0.0/8");
    let unknown = key(
        &s,
        &Req::from("10.1.1.1").with("X-Forwarded-For", "unknown"),
    );
    let Some(unknown) = unknown else {
        panic!("an unknown client has a key");
    };
    for r in [
        Req::from("10.1.1.1").with("X-Forwarded-For", "_hidden"),
        Req::from("10.2.2.2").with("X-Forwarded-For", "6.6.6.6, garbage"),
        Req::from("10.2.2.2"),
        Req {
            resolved: Some(Some(Client::Unknown)),
            ..Req::from("10.1.1.1")
        },
    ] {
        assert_eq!(key(&s, &r).as_deref(), Some(&unknown[..]));
    }
    // Not the proxy's key, nor any address's, nor --key-missing's (empty).
    let untrusted = spec("ip", "");
    for proxy in ["10.1.1.1", "10.2.2.2", "0.0.0.0", "::"] {
        assert_ne!(key(&untrusted, &Req::from(proxy)), Some(unknown.clone()));
    }
    assert!(!unknown.is_empty());
    assert_eq!(s.display(&unknown), "ip=unknown");
    // Combined with another source, it still keys apart.
    let both = spec("ip,header:X-User", "10.0.0.0/8");
    let with = |fwd: &str| {
        key(
            &both,
            &Req::from("10.1.1.1")
                .with("X-Forwarded-For", fwd)
                .with("X-User", "a"),
        )
    };
    assert_ne!(with("unknown"), with("10.1.1.1"));
    assert_eq!(with("unknown"), with("_hidden"));
    assert!(with("unknown").is_some());
}

/// A client pads its X-Forwarded-For so that the proxy's entry would fall
/// beyond what is read: the tail is read, so the proxy's entry is found.
#[test]
fn an_over_long_forwarding_chain_cannot_hide_the_proxys_entry() {
    let s = spec("ip", "10.0.0.0/8");
    let mut padded = "1.1.1.1, ".repeat(2 * MAX_FORWARDED_BYTES / 9);
    padded.push_str("6.6.6.6");
    let r = Req::from("10.1.1.1")
        .with("X-Forwarded-For", &padded)
        .with("X-Forwarded-For", "198.51.100.7");
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.7"));
    // Even all in one field, and ending exactly at a cut.
    let r = Req::from("10.1.1.1").with("X-Forwarded-For", &format!("{padded}, 198.51.100.8"));
    assert_eq!(s.proxies.client_ip(&r), ip("198.51.100.8"));
}

#[test]
fn headers_cookies_and_query_parameters_are_keys() {
    let s = spec("header:X-User", "");
    let alice = key(&s, &Req::from("1.1.1.1").with("x-user", "alice"));
    assert_eq!(
        alice,
        key(&s, &Req::from("2.2.2.2").with("X-User", "alice"))
    );
    assert_ne!(alice, key(&s, &Req::from("1.1.1.1").with("X-User", "bob")));
    assert_eq!(key(&s, &Req::from("1.1.1.1")), None, "missing header");

    let s = spec("cookie:sid", "");
    let r = Req::from("1.1.1.1").with("Cookie", "a=1; sid=abc; b=2");
    let r2 = Req::from("1.1.1.1")
        .with("Cookie", "x=y")
        .with("Cookie", "sid=abc");
    assert_eq!(key(&s, &r), key(&s, &r2));
    assert_eq!(
        key(&s, &Req::from("1.1.1.1").with("Cookie", "sidx=abc")),
        None
    );

    let s = spec("query:k", "");
    let mut r = Req::from("1.1.1.1");
    r.query = Some(b"a=1&k=v1&b".to_vec());
    let v1 = key(&s, &r);
    r.query = Some(b"k=v2".to_vec());
    assert_ne!(v1, key(&s, &r));
    r.query = Some(b"kk=v1".to_vec());
    assert_eq!(key(&s, &r), None);
    r.query = Some(b"k".to_vec());
    assert!(key(&s, &r).is_some(), "present without a value is a key");
}

#[test]
fn combined_keys_are_unambiguous() {
    let s = spec("header:A,header:B", "");
    let r1 = Req::from("1.1.1.1").with("A", "xy").with("B", "z");
    let r2 = Req::from("1.1.1.1").with("A", "x").with("B", "yz");
    assert_ne!(key(&s, &r1), key(&s, &r2));
    assert_eq!(key(&s, &Req::from("1.1.1.1").with("A", "x")), None);
}

proptest! {
    /// Whatever a client sends, finding its key terminates, bounds what it
    /// keeps, and never panics.
    #[test]
    fn hostile_input_is_bounded(
        xff in proptest::collection::vec(any::<u8>(), 0..4096),
        cookie in proptest::collection::vec(any::<u8>(), 0..4096),
        query in proptest::collection::vec(any::<u8>(), 0..4096),
    ) {
        let s = spec("ip,cookie:s,query:q,header:X-Forwarded-For", "0.0.0.0/0,::/0");
        let mut r = Req::from("10.0.0.1");
        r.headers.push(("X-Forwarded-For", xff));
        r.headers.push(("Cookie", cookie));
        r.query = Some(query);
        let mut out = Vec::new();
        let _ = s.key(&r, &mut out);
        prop_assert!(out.len() <= 4 * (3 + MAX_SOURCE_BYTES));
    }
}

#[test]
fn keys_display_for_operators() {
    let spec = KeySpec {
        sources: vec![Source::Ip, Source::Header("X-User".into())],
        v4_prefix: 24,
        v6_prefix: 64,
        proxies: TrustedProxies {
            trusted: vec![],
            forwarded: ForwardedHeader::XForwardedFor,
        },
    };
    let mut key = Vec::new();
    push_part(&mut key, 0, &[192, 0, 2, 0]);
    push_part(&mut key, 1, b"alice\n");
    assert_eq!(
        spec.display(&key),
        r#"ip=192.0.2.0/24,header:X-User='alice\n'"#
    );
    let v6 = KeySpec {
        sources: vec![Source::Ip],
        ..spec
    };
    let mut key = Vec::new();
    push_part(
        &mut key,
        0,
        &"2001:db8::".parse::<std::net::Ipv6Addr>().unwrap().octets(),
    );
    assert_eq!(v6.display(&key), "ip=2001:db8::/64");
    let mut key = Vec::new();
    push_part(&mut key, 0, UNKNOWN_CLIENT);
    assert_eq!(v6.display(&key), "ip=unknown");
    // Truncated or hostile bytes never panic.
    assert_eq!(v6.display(&[0, 0xff, 0xff, 1]), "ip='\\u{1}'");
    assert_eq!(v6.display(&[]), "");
}

/// What a command names a key by: its value, or `top`'s display of it.
#[test]
fn commands_name_keys_as_top_shows_them_or_by_value() {
    let named = |s: &KeySpec, text: &str| {
        let mut out = Vec::new();
        s.named_key(text, &mut out).then_some(out)
    };
    let ip = KeySpec {
        v4_prefix: 24,
        ..spec("ip", "")
    };
    let req = Req {
        remote: Some("192.0.2.77".parse().unwrap()),
        ..Req::default()
    };
    let k = key(&ip, &req).unwrap();
    assert_eq!(ip.display(&k), "ip=192.0.2.0/24");
    for text in ["192.0.2.77", "192.0.2.1", "ip=192.0.2.0/24", "192.0.2.0/24"] {
        assert_eq!(named(&ip, text).as_ref(), Some(&k), "{text}");
    }
    // Another prefix than the rule's names no key (not its first address).
    assert_eq!(named(&ip, "192.0.2.0/16"), None);
    assert_eq!(named(&ip, "192.0.2.0/x"), None);
    assert_ne!(named(&ip, "192.0.3.1").as_ref(), Some(&k));
    let mut unknown = Vec::new();
    push_part(&mut unknown, 0, UNKNOWN_CLIENT);
    assert_eq!(named(&ip, "ip=unknown"), Some(unknown));
    assert_eq!(named(&ip, "alice"), None, "not an address");
    let user = spec("header:X-User", "");
    let req = Req {
        headers: vec![("X-User", b"alice".to_vec())],
        ..Req::default()
    };
    let k = key(&user, &req).unwrap();
    assert_eq!(user.display(&k), "header:X-User='alice'");
    for text in ["alice", "header:X-User='alice'", "'alice'"] {
        assert_eq!(named(&user, text).as_ref(), Some(&k), "{text}");
    }
    // A display that was cut or escaped names no key (never another one).
    let long = "x".repeat(100);
    let req = Req {
        headers: vec![("X-User", long.as_bytes().to_vec())],
        ..Req::default()
    };
    let shown = user.display(&key(&user, &req).unwrap());
    assert!(shown.contains('…'), "{shown}");
    assert_eq!(named(&user, &shown), None);
    assert_eq!(named(&user, "header:X-User='a\\nb'"), None);
    assert_eq!(
        named(&user, long.as_str()),
        key(&user, &req),
        "its value names it"
    );
    // Several sources: only `#HASH`, which the plugin reads.
    assert_eq!(named(&spec("ip,header:X-User", ""), "192.0.2.1"), None);
}
