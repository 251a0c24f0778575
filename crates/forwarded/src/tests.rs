use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The client at address `s`.
fn at(s: &str) -> Client {
    Client::Addr(ip(s))
}

const UNKNOWN: Client = Client::Unknown;
const RFC7239: ForwardedHeader = ForwardedHeader::Forwarded;

fn nets(s: &str) -> Vec<IpNet> {
    parse_trusted(s).unwrap_or_else(|e| panic!("{e}"))
}

/// The client of a request from `remote` carrying `fields` (name, value).
fn client(trusted: &str, header: ForwardedHeader, remote: &str, fields: &[(&str, &str)]) -> Client {
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
    assert_eq!(client("", XFF, "10.1.1.1", &xff), at("10.1.1.1"));
    assert_eq!(
        client("10.0.0.0/8", XFF, "192.0.2.1", &xff),
        at("192.0.2.1")
    );
    assert_eq!(
        client("10.0.0.0/8", XFF, "10.1.1.1", &xff),
        at("198.51.100.7")
    );
    // An untrusted remote without the header: the remote.
    assert_eq!(client("10.0.0.0/8", XFF, "192.0.2.1", &[]), at("192.0.2.1"));
    // A mapped remote is its IPv4 address, trusted as such.
    assert_eq!(
        client("10.0.0.0/8", XFF, "::ffff:10.1.1.1", &xff),
        at("198.51.100.7")
    );
}

#[test]
fn the_right_most_untrusted_entry_is_the_client() {
    let t = "10.0.0.0/8";
    // A spoofed left-most entry is never believed.
    let spoofed = [("X-Forwarded-For", "6.6.6.6, 198.51.100.7")];
    assert_eq!(client(t, XFF, "10.1.1.1", &spoofed), at("198.51.100.7"));
    // Chains of trusted proxies are walked; several fields join in order.
    let chain = [
        ("X-Forwarded-For", "6.6.6.6, 198.51.100.7"),
        ("X-Forwarded-For", "10.2.2.2, 10.3.3.3"),
    ];
    assert_eq!(client(t, XFF, "10.1.1.1", &chain), at("198.51.100.7"));
    // Every entry trusted: the left-most one (a machine inside the trusted
    // network), never unknown.
    let all = [("X-Forwarded-For", "10.9.9.9, 10.2.2.2")];
    assert_eq!(client(t, XFF, "10.1.1.1", &all), at("10.9.9.9"));
    let one = [("Forwarded", "for=10.9.9.9")];
    assert_eq!(client(t, RFC7239, "10.1.1.1", &one), at("10.9.9.9"));
    // Ports, brackets, quotes, mapped addresses.
    for (v, want) in [
        ("[2001:db8::5]:443", "2001:db8::5"),
        ("198.51.100.7:5555", "198.51.100.7"),
        ("\"198.51.100.8\"", "198.51.100.8"),
        ("::ffff:198.51.100.9", "198.51.100.9"),
    ] {
        assert_eq!(
            client(t, XFF, "10.1.1.1", &[("X-Forwarded-For", v)]),
            at(want),
            "{v}"
        );
    }
}

/// A trusted proxy that does not name its client: the client is unknown,
/// never the proxy (nor the last trusted hop before the gap).
#[test]
fn a_client_the_trusted_proxy_does_not_name_is_unknown() {
    let t = "10.0.0.0/8";
    // No header at all, or an empty one.
    assert_eq!(client(t, XFF, "10.1.1.1", &[]), UNKNOWN);
    assert_eq!(client(t, RFC7239, "10.1.1.1", &[]), UNKNOWN);
    assert_eq!(
        client(t, XFF, "10.1.1.1", &[("X-Forwarded-For", "")]),
        UNKNOWN
    );
    // Only the configured header counts: another one is as good as none.
    let other = [("Forwarded", "for=198.51.100.7")];
    assert_eq!(client(t, XFF, "10.1.1.1", &other), UNKNOWN);
    for v in [
        // RFC 7239's identifiers: unknown, obfuscated (_hidden, _abc).
        "unknown",
        "_hidden",
        "_SEVKISEK",
        // Garbage, a host name, an address with a prefix.
        "nonsense",
        "client.example",
        "198.51.100.0/24",
        // Behind a trusted hop, or left of an untrusted one that is never reached.
        "198.51.100.7, unknown",
        "6.6.6.6, _hidden, 10.2.2.2",
    ] {
        let xff = [("X-Forwarded-For", v)];
        assert_eq!(client(t, XFF, "10.1.1.1", &xff), UNKNOWN, "{v}");
        let fwd = format!("for={v}");
        let fwd = [("Forwarded", fwd.as_str())];
        assert_eq!(client(t, RFC7239, "10.1.1.1", &fwd), UNKNOWN, "{v}");
    }
    for v in [
        "for=unknown",
        "for=\"_hidden\"",
        "for=_obf;proto=https",
        "for=",
        "for=\"\"",
        "proto=http;by=10.1.1.1",
        "for=7.7.7.7, proto=http",
        "for=7.7.7.7, for=unknown;by=10.1.1.1",
    ] {
        let fwd = [("Forwarded", v)];
        assert_eq!(client(t, RFC7239, "10.1.1.1", &fwd), UNKNOWN, "{v}");
    }
    // An untrusted address right of the gap is still the client.
    let named = [("X-Forwarded-For", "unknown, 198.51.100.7, 10.2.2.2")];
    assert_eq!(client(t, XFF, "10.1.1.1", &named), at("198.51.100.7"));
    // An untrusted remote is its own client, whatever it forwards.
    let gap = [("X-Forwarded-For", "unknown")];
    assert_eq!(client(t, XFF, "192.0.2.1", &gap), at("192.0.2.1"));
    assert_eq!(client("", XFF, "10.1.1.1", &gap), at("10.1.1.1"));
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
    assert_eq!(client(t, XFF, "10.1.1.1", &both), at("6.6.6.6"));
    assert_eq!(client(t, RFC7239, "10.1.1.1", &both), at("2001:db8::9"));
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
        at("198.51.100.7")
    );
    // More trusted hops than are read: the walk stops at the last one read.
    let hops = vec!["10.0.0.9"; MAX_FORWARDED_HOPS + 5].join(", ");
    let fields = [("X-Forwarded-For", format!("6.6.6.6, {hops}"))];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(
        client("10.0.0.0/8", XFF, "10.1.1.1", &fields),
        at("10.0.0.9")
    );
}

/// A chain over [`MAX_FORWARDED_BYTES`] of trusted hops: the cut-off entry
/// the walk reaches is not an address, even when its end parses as one.
#[test]
fn the_cut_off_entry_of_an_over_long_chain_is_unknown() {
    // Trusted hops padded with spaces (trimmed when read), fewer than
    // MAX_FORWARDED_HOPS, that fill the bytes read after `first`.
    let chain = |first: &str, left: &str| {
        let hops = 20;
        let budget = MAX_FORWARDED_BYTES - first.len() - hops * ",10.0.0.19".len();
        let mut body = String::new();
        for i in 0..hops {
            let pad = budget / hops + if i == 0 { budget % hops } else { 0 };
            body.push(',');
            body.push_str(&" ".repeat(pad));
            body.push_str("10.0.0.19");
        }
        let v = format!("{left}{first}{body}");
        assert_eq!(v.len() - MAX_FORWARDED_BYTES, left.len());
        v
    };
    let t = "10.0.0.0/8";
    let xff = |v: &str| client(t, XFF, "10.1.1.1", &[("X-Forwarded-For", v)]);
    // `10.0.0.19` cut to `0.0.0.19`: an address, but not the one sent.
    assert_eq!(xff(&chain("0.0.0.19", "6.6.6.6, 1")), UNKNOWN);
    // Cut to `.19`: not an address.
    assert_eq!(xff(&chain(".19", "6.6.6.6, 10.0.0")), UNKNOWN);
    // Cut just after a comma: the first entry read is whole.
    assert_eq!(xff(&chain("10.0.0.19", "6.6.6.6,")), at("10.0.0.19"));
    assert_eq!(xff(&chain("198.51.100.7", "6.6.6.6,")), at("198.51.100.7"));
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
            at("192.0.2.1")
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
        prop_assert_eq!(got, Client::Addr(IpAddr::V4(client_ip_v4)));
    }
}
