use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn nets(s: &str) -> Vec<IpNet> {
    parse_trusted(s).unwrap_or_else(|e| panic!("{e}"))
}

/// The client of a request from `remote` carrying `fields` (name, value).
fn client(trusted: &str, header: ForwardedHeader, remote: &str, fields: &[(&str, &str)]) -> IpAddr {
    let trusted = if trusted.is_empty() {
        Vec::new()
    } else {
        nets(trusted)
    };
    client_ip(&trusted, header, ip(remote), |name| {
        let v: Vec<&str> = fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect();
        (!v.is_empty()).then(|| v.join(", ").into_bytes())
    })
}

const XFF: ForwardedHeader = ForwardedHeader::XForwardedFor;

#[test]
fn names_and_networks_parse() {
    assert_eq!(
        ForwardedHeader::parse("x-forwarded-FOR"),
        Some(ForwardedHeader::XForwardedFor)
    );
    assert_eq!(
        ForwardedHeader::parse("Forwarded"),
        Some(ForwardedHeader::Forwarded)
    );
    assert_eq!(ForwardedHeader::parse("X-Real-IP"), None);
    let n = nets("10.1.2.3/8, 127.0.0.1,::1, 2001:db8::7/32");
    let shown: Vec<String> = n.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        shown,
        ["10.0.0.0/8", "127.0.0.1/32", "::1/128", "2001:db8::/32"]
    );
    assert_eq!(
        parse_trusted("10.0.0.0/8,10.0.0.0/33").unwrap_err(),
        "'10.0.0.0/33' is not an IP address or CIDR"
    );
    assert!(parse_trusted("").is_err());
    assert!(parse_trusted("10.0.0.1,").is_err());
}

#[test]
fn the_header_is_believed_only_from_a_trusted_remote() {
    let xff = [("X-Forwarded-For", "198.51.100.7")];
    assert_eq!(client("", XFF, "10.1.1.1", &xff), ip("10.1.1.1"));
    assert_eq!(
        client("10.0.0.0/8", XFF, "192.0.2.1", &xff),
        ip("192.0.2.1")
    );
    assert_eq!(
        client("10.0.0.0/8", XFF, "10.1.1.1", &xff),
        ip("198.51.100.7")
    );
    // Trusted remote without the header: the remote.
    assert_eq!(client("10.0.0.0/8", XFF, "10.1.1.1", &[]), ip("10.1.1.1"));
    // A mapped remote is its IPv4 address, trusted as such.
    assert_eq!(
        client("10.0.0.0/8", XFF, "::ffff:10.1.1.1", &xff),
        ip("198.51.100.7")
    );
}

#[test]
fn the_right_most_untrusted_entry_is_the_client() {
    let t = "10.0.0.0/8";
    // A spoofed left-most entry is never believed.
    let spoofed = [("X-Forwarded-For", "6.6.6.6, 198.51.100.7")];
    assert_eq!(client(t, XFF, "10.1.1.1", &spoofed), ip("198.51.100.7"));
    // Chains of trusted proxies are walked; several fields join in order.
    let chain = [
        ("X-Forwarded-For", "6.6.6.6, 198.51.100.7"),
        ("X-Forwarded-For", "10.2.2.2, 10.3.3.3"),
    ];
    assert_eq!(client(t, XFF, "10.1.1.1", &chain), ip("198.51.100.7"));
    // Every entry trusted: the left-most one.
    let all = [("X-Forwarded-For", "10.9.9.9, 10.2.2.2")];
    assert_eq!(client(t, XFF, "10.1.1.1", &all), ip("10.9.9.9"));
    // Ports, brackets, quotes, mapped addresses.
    for (v, want) in [
        ("[2001:db8::5]:443", "2001:db8::5"),
        ("198.51.100.7:5555", "198.51.100.7"),
        ("\"198.51.100.8\"", "198.51.100.8"),
        ("::ffff:198.51.100.9", "198.51.100.9"),
    ] {
        assert_eq!(
            client(t, XFF, "10.1.1.1", &[("X-Forwarded-For", v)]),
            ip(want),
            "{v}"
        );
    }
    // Garbage ends the walk at the last good hop (here the proxy itself).
    let bad = [("X-Forwarded-For", "6.6.6.6, nonsense")];
    assert_eq!(client(t, XFF, "10.1.1.1", &bad), ip("10.1.1.1"));
}

#[test]
fn only_the_configured_header_is_read() {
    let t = "10.0.0.0/8";
    let both = [
        ("X-Forwarded-For", "6.6.6.6"),
        (
            "Forwarded",
            "for=7.7.7.7, for=\"[2001:db8::9]:80\";proto=https;by=10.1.1.1",
        ),
    ];
    assert_eq!(client(t, XFF, "10.1.1.1", &both), ip("6.6.6.6"));
    assert_eq!(
        client(t, ForwardedHeader::Forwarded, "10.1.1.1", &both),
        ip("2001:db8::9")
    );
    // An element without for= ends the walk.
    let no_for = [("Forwarded", "for=7.7.7.7, proto=http")];
    assert_eq!(
        client(t, ForwardedHeader::Forwarded, "10.1.1.1", &no_for),
        ip("10.1.1.1")
    );
}

/// A client pads its header so that the proxy's entry would fall beyond
/// what is read: the tail is read, so the proxy's entry is found.
#[test]
fn padding_cannot_hide_the_proxys_entry() {
    let mut padded = "1.1.1.1, ".repeat(2 * MAX_FORWARDED_BYTES / 9);
    padded.push_str("6.6.6.6");
    let fields = [
        ("X-Forwarded-For", padded.as_str()),
        ("X-Forwarded-For", "198.51.100.7"),
    ];
    assert_eq!(
        client("10.0.0.0/8", XFF, "10.1.1.1", &fields),
        ip("198.51.100.7")
    );
    // More trusted hops than are read: the walk stops at the last one read.
    let hops = vec!["10.0.0.9"; MAX_FORWARDED_HOPS + 5].join(", ");
    let fields = [("X-Forwarded-For", format!("6.6.6.6, {hops}"))];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(
        client("10.0.0.0/8", XFF, "10.1.1.1", &fields),
        ip("10.0.0.9")
    );
}

proptest! {
    /// Whatever the header holds, the walk terminates without panicking,
    /// and an untrusted remote is always its own client.
    #[test]
    fn hostile_headers_are_bounded(
        v in proptest::collection::vec(any::<u8>(), 0..20_000),
        rfc7239 in any::<bool>(),
    ) {
        let h = if rfc7239 { ForwardedHeader::Forwarded } else { XFF };
        let all = nets("0.0.0.0/0,::/0");
        let _ = client_ip(&all, h, ip("10.0.0.1"), |_| Some(v.clone()));
        let some = nets("10.0.0.0/8");
        prop_assert_eq!(
            client_ip(&some, h, ip("192.0.2.1"), |_| Some(v.clone())),
            ip("192.0.2.1")
        );
    }

    /// The client is the remote or an address of the chain, and never one of
    /// the entries left of the right-most untrusted one.
    #[test]
    fn entries_left_of_the_client_never_count(
        left in proptest::collection::vec(any::<[u8; 4]>(), 0..6),
        client_addr in any::<[u8; 4]>(),
        proxies in 0usize..4,
    ) {
        let client_ip_v4 = std::net::Ipv4Addr::from(client_addr);
        prop_assume!(client_ip_v4.octets()[0] != 10);
        let mut chain: Vec<String> = left.iter().map(|a| std::net::Ipv4Addr::from(*a).to_string()).collect();
        chain.push(client_ip_v4.to_string());
        chain.extend((0..proxies).map(|i| format!("10.0.0.{i}")));
        let got = client_ip(&nets("10.0.0.0/8"), XFF, ip("10.9.9.9"), |_| Some(chain.join(", ").into_bytes()));
        prop_assert_eq!(got, IpAddr::V4(client_ip_v4));
    }
}
