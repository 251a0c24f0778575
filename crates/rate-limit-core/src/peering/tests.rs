use super::*;
use crate::key::{ForwardedHeader, KeySpec, TrustedProxies};

fn spec(sources: Vec<Source>) -> KeySpec {
    KeySpec {
        sources,
        v4_prefix: 32,
        v6_prefix: 64,
        proxies: TrustedProxies {
            trusted: Vec::new(),
            forwarded: ForwardedHeader::XForwardedFor,
        },
    }
}

#[test]
fn one_source_tags_are_their_text() {
    let mut k = vec![0, 0, 4, 192, 0, 2, 7];
    to_peer_tag(&spec(vec![Source::Ip]), &mut k);
    assert_eq!(k, b"192.0.2.7");
    let mut k = vec![
        0, 0, 16, 0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    to_peer_tag(&spec(vec![Source::Ip]), &mut k);
    assert_eq!(k, b"2001:db8::/64");
    // A client its trusted proxy did not name: not empty (--key-missing's).
    let mut k = vec![0, 0, 0];
    to_peer_tag(&spec(vec![Source::Ip]), &mut k);
    assert_eq!(k, b"unknown");
    let mut k = vec![0, 0, 3, b'a', b'b', b'c'];
    to_peer_tag(&spec(vec![Source::Header("X-Api".into())]), &mut k);
    assert_eq!(k, b"abc");
}

#[test]
fn several_sources_keep_their_unambiguous_bytes_and_long_tags_are_hashed() {
    let s = spec(vec![Source::Ip, Source::Header("X".into())]);
    let orig = vec![0, 0, 4, 1, 2, 3, 4, 1, 0, 1, b'x'];
    let mut k = orig.clone();
    to_peer_tag(&s, &mut k);
    assert_eq!(k, orig);
    let mut k = vec![0, 1, 44];
    k.extend(std::iter::repeat_n(b'z', 300));
    to_peer_tag(&spec(vec![Source::Query("t".into())]), &mut k);
    assert!(k.starts_with(b"sha256:") && k.len() == 71);
    let mut empty = Vec::new();
    to_peer_tag(&s, &mut empty);
    assert!(empty.is_empty());
}

fn raw(v: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    v.iter().map(|(n, v)| (*n, v.to_string())).collect()
}

#[test]
fn options_parse_with_defaults() {
    let o = parse(
        &raw(&[
            ("peers", "127.0.0.1:9001, 127.0.0.1:9002"),
            ("peer-secret-file", "peer.key"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(o.peers.len(), 2);
    assert_eq!(o.listen, DEFAULT_LISTEN);
    assert_eq!(
        (o.period_ms, o.max_tags, o.max_senders),
        (1000, 10_000, 1024)
    );
    let g = parse(
        &raw(&[
            ("peer-group", "239.1.2.3:7500"),
            ("peer-secret-file", "k"),
            ("peer-period", "250"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(g.listen.port(), 7500);
    assert_eq!(g.period_ms, 250);
    assert_eq!(parse(&[], false, false, None).unwrap(), None);
}

#[test]
fn errors_name_the_option_the_value_and_what_is_allowed() {
    let e = |v: &[(&'static str, &str)], key, rate, group| {
        parse(&raw(v), key, rate, group).unwrap_err().0
    };
    let ok = |extra: (&'static str, &'static str)| {
        e(
            &[("peers", "127.0.0.1:1"), ("peer-secret-file", "k"), extra],
            true,
            true,
            Some("g"),
        )
    };
    assert_eq!(
        ok(("peer-period", "5")),
        "--peer-period has an invalid value '5': allowed an integer from 10 to 60000"
    );
    assert!(ok(("peer-listen", "nope"))
        .starts_with("--peer-listen has an invalid value 'nope': allowed HOST:PORT"));
    assert!(ok(("peer-max-tags", "0")).starts_with("--peer-max-tags has an invalid value '0'"));
    assert_eq!(
        ok(("peer-max-senders", "65537")),
        "--peer-max-senders has an invalid value '65537': allowed an integer from 1 to 65536"
    );
    assert!(e(&[("peers", "1.2.3.4:5,x")], true, true, Some("g"))
        .starts_with("--peers has an invalid value '1.2.3.4:5,x': allowed HOST:PORT, comma-separated ('x' is not one)"));
    assert!(e(
        &[("peer-group", "10.0.0.1:5"), ("peer-secret-file", "k")],
        true,
        true,
        Some("g")
    )
    .starts_with("--peer-group has an invalid value '10.0.0.1:5': allowed an IPv4 multicast"));
    assert!(e(&[("peer-period", "100")], true, true, Some("g"))
        .starts_with("--peer-period needs --peers"));
    assert!(e(&[("peers", "127.0.0.1:1")], true, true, Some("g"))
        .starts_with("--peers/--peer-group need --peer-secret-file"));
    assert!(e(
        &[("peers", "127.0.0.1:1"), ("peer-secret-file", "k")],
        false,
        true,
        Some("g")
    )
    .contains("need --key and --rate"));
    assert!(e(
        &[("peers", "127.0.0.1:1"), ("peer-secret-file", "k")],
        true,
        true,
        None
    )
    .contains("need --group=NAME"));
}

#[test]
fn peer_allow_takes_addresses_and_networks_and_unicast_peers_are_implicit() {
    let o = parse(
        &raw(&[
            ("peer-group", "239.1.2.3:7500"),
            ("peer-secret-file", "k"),
            ("peer-allow", "10.0.0.0/8, 192.0.2.7,2001:db8::1/64"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    let nets: Vec<String> = o.allowed_senders().iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/64"]);
    // A multicast group without --peer-allow accepts any sender (MAC only).
    let g = parse(
        &raw(&[("peer-group", "239.1.2.3:7500"), ("peer-secret-file", "k")]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    assert!(g.allowed_senders().is_empty());
    // Unicast peers are allowed implicitly, --peer-allow adds to them.
    let u = parse(
        &raw(&[
            ("peers", "127.0.0.1:9001"),
            ("peer-secret-file", "k"),
            ("peer-allow", "127.0.0.3"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    let nets: Vec<String> = u.allowed_senders().iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["127.0.0.1/32", "127.0.0.3/32"]);
    // IPv4-mapped IPv6 peers and networks are taken as IPv4 (sources are
    // checked canonical).
    let m = parse(
        &raw(&[
            ("peers", "[::ffff:127.0.0.1]:9001"),
            ("peer-secret-file", "k"),
            ("peer-allow", "::ffff:10.1.2.3/112,::ffff:192.0.2.7"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    let nets: Vec<String> = m.allowed_senders().iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["127.0.0.1/32", "10.1.0.0/16", "192.0.2.7/32"]);
    assert_eq!(m.peers, ["127.0.0.1:9001".parse().unwrap()]);
    assert!(u
        .socket_options()
        .contains(&("peer-allow", "127.0.0.3/32".to_owned())));
    let e = parse(
        &raw(&[
            ("peers", "127.0.0.1:1"),
            ("peer-secret-file", "k"),
            ("peer-allow", "10.0.0.0/8,nope"),
        ]),
        true,
        true,
        Some("g"),
    )
    .unwrap_err()
    .0;
    assert_eq!(
        e,
        "--peer-allow has an invalid value '10.0.0.0/8,nope': allowed IP addresses or CIDR networks, comma-separated ('nope' is not one)"
    );
}

/// The sender table is the socket's, so its size is one of the settings
/// every peered rule of the process must agree on.
#[test]
fn peer_max_senders_sizes_the_shared_socket() {
    let o = parse(
        &raw(&[
            ("peers", "127.0.0.1:9001"),
            ("peer-secret-file", "k"),
            ("peer-max-senders", "4096"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(o.max_senders, 4096);
    assert!(o
        .socket_options()
        .contains(&("peer-max-senders", "4096".to_owned())));
}

#[test]
fn peer_interface_joins_the_group_on_a_local_address_and_needs_a_group() {
    let err = |r: &[(&'static str, &str)]| {
        parse(&raw(r), true, true, Some("api"))
            .unwrap_err()
            .to_string()
    };
    let o = parse(
        &raw(&[
            ("peer-group", "239.1.2.3:7500"),
            ("peer-secret-file", "k"),
            ("peer-interface", "127.0.0.1"),
        ]),
        true,
        true,
        Some("api"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(o.interface, Ipv4Addr::LOCALHOST);
    assert!(o
        .socket_options()
        .contains(&("peer-interface", "127.0.0.1".to_owned())));
    assert!(err(&[
        ("peer-group", "239.1.2.3:7500"),
        ("peer-secret-file", "k"),
        ("peer-interface", "lo"),
    ])
    .starts_with("--peer-interface has an invalid value 'lo': allowed a local IPv4 address"));
    assert!(err(&[
        ("peers", "127.0.0.1:9001"),
        ("peer-secret-file", "k"),
        ("peer-interface", "127.0.0.1"),
    ])
    .starts_with("--peer-interface needs --peer-group"));
}

/// A peered key is shown as its key would be, and that name reads back
/// (`KeySpec::named_key`, then `to_peer_tag`) to the same tag.
#[test]
fn tag_names_read_back_to_their_tag() {
    for (sources, key) in [
        (vec![Source::Ip], vec![0, 0, 4, 192, 0, 2, 7]),
        (vec![Source::Ip], vec![0, 0, 0]),
        (
            vec![Source::Header("X-Api".into())],
            vec![0, 0, 3, b'a', b'b', b'c'],
        ),
        (
            vec![Source::Ip, Source::Header("X-Api".into())],
            vec![0, 0, 4, 192, 0, 2, 7, 1, 0, 1, b'z'],
        ),
    ] {
        let s = spec(sources);
        let mut tag = key.clone();
        to_peer_tag(&s, &mut tag);
        let name = tag_name(&s, &tag);
        assert_eq!(name, s.display(&key), "shown as the key is");
        let mut back = Vec::new();
        if s.named_key(&name, &mut back) {
            to_peer_tag(&s, &mut back);
            assert_eq!(back, tag, "{name}");
        } else {
            assert_eq!(
                s.sources.len(),
                2,
                "only keys of several sources need #HASH"
            );
        }
    }
}
