use super::*;

#[test]
fn defaults_and_every_setting() {
    let c = parse("# nothing\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((c.burst, c.rate, c.max_line), (10, 1.0, 256));
    assert_eq!(c.idle_timeout, Some(Duration::from_secs(300)));
    assert!(!c.peering());
    let text = "burst = 5\nrate = 0.5 # slow\nperiod_ms = 200\nlisten_tcp = 127.0.0.1:0, 127.0.0.1:1\n\
        listen_unix = /tmp/x.sock\nunix_mode = 600\npeers = 127.0.0.1:9000\npeer_listen = 127.0.0.1:9001\n\
        peer_secret_file = /etc/s\npeer_name = api\nreplay_window_ms = 5000\npeer_max_senders = 16\nmax_tags = 7\n\
        max_report_tags = 3\nmax_line = 64\nmax_connections = 9\nwrite_timeout_ms = 50\n\
        idle_timeout_ms = 0\non_full = serve\nstats_interval_s = 10\n";
    let c = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.burst, c.rate, c.period),
        (5, 0.5, Duration::from_millis(200))
    );
    assert_eq!(c.listen_tcp.len(), 2);
    assert_eq!(c.unix_mode, 0o600);
    assert_eq!(
        c.peer_allow,
        vec![IpNet::from(IpAddr::V4(Ipv4Addr::LOCALHOST))]
    );
    assert_eq!(
        (c.max_tags, c.max_report_tags, c.max_line, c.max_connections),
        (7, 3, 64, 9)
    );
    assert_eq!((c.on_full, c.idle_timeout), (OnFull::Serve, None));
    assert_eq!(c.peer_name, "api");
    assert_eq!(c.peer_max_senders, 16);
}

/// The documented example is valid and states the defaults.
#[test]
fn the_example_file_states_the_defaults() {
    let c = parse(include_str!("../../dthrottled.conf.example")).unwrap_or_else(|e| panic!("{e}"));
    let d = Config::default();
    assert_eq!(
        (c.burst, c.rate, c.period, c.max_tags),
        (d.burst, d.rate, d.period, d.max_tags)
    );
    assert_eq!(
        (c.listen_tcp, c.max_line, c.max_connections),
        (d.listen_tcp, d.max_line, d.max_connections)
    );
    assert_eq!(
        (c.replay_window, c.write_timeout, c.unix_mode),
        (d.replay_window, d.write_timeout, d.unix_mode)
    );
    assert_eq!(c.idle_timeout, d.idle_timeout);
    assert_eq!(c.peer_max_senders, d.peer_max_senders);
}

#[test]
fn errors_name_the_line_setting_value_and_what_is_allowed() {
    for (text, want) in [
        (
            "rate = 0",
            "line 1: rate = \"0\" is not valid: tokens per second",
        ),
        (
            "\nburst = x",
            "line 2: burst = \"x\" is not valid: a whole number from 1",
        ),
        ("peer_group = 10.0.0.1:5", "IPv4 multicast"),
        ("on_full = maybe", "refuse or serve"),
        ("peer_name = --dry", "not starting with '-'"),
        ("bogus = 1", "unknown setting \"bogus\""),
        ("burst", "is not `name = value`"),
        ("peers = 127.0.0.1:5", "peer_secret_file is not"),
        (
            "peers = 127.0.0.1:5\npeer_group = 239.1.1.1:5\npeer_secret_file = /s",
            "peers and peer_group exclude each other",
        ),
        ("listen_tcp =", "nothing to listen on"),
        ("max_line = 0", "max_line = \"0\""),
        (
            "peer_max_senders = 65537",
            "line 1: peer_max_senders = \"65537\" is not valid: a whole number from 1 to 65536",
        ),
        ("peer_allow = 10.0.0.0/8,x", "IP addresses or CIDR networks"),
    ] {
        let e = parse(text).map(|_| ()).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// The setting table is the single source of the names: every name in
/// it is a setting, a name not in it is unknown, and docs/dthrottled.md's
/// table and dthrottled.conf.example (commented-out lines too) list
/// exactly its names.
#[test]
fn the_table_is_the_single_source_of_names() {
    assert_eq!(optspec::duplicates(&tables()), Vec::<&str>::new());
    let mut known: Vec<&str> = optspec::names(&tables()).collect();
    for name in &known {
        let e = parse(&format!("{name} = x!\n")).err().unwrap_or_default();
        assert!(!e.contains("unknown setting"), "{name}: {e}");
    }
    assert_eq!(
        parse("max_tag = 1").map(|_| ()).unwrap_err(),
        "line 1: unknown setting \"max_tag\""
    );
    known.sort_unstable();
    let md = include_str!("../../../../docs/dthrottled.md");
    let documented = optspec::documented(md, "Configuration", "").expect("a Configuration section");
    assert_eq!(documented, known, "docs/dthrottled.md");
    let mut example: Vec<&str> = include_str!("../../dthrottled.conf.example")
        .lines()
        .filter_map(|l| {
            let (name, _) = l.strip_prefix('#').unwrap_or(l).split_once('=')?;
            let name = name.trim();
            let setting =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            setting.then_some(name)
        })
        .collect();
    example.sort_unstable();
    assert_eq!(example, known, "dthrottled.conf.example");
}

/// The file is read bounded; every refusal names the file.
#[test]
fn load_names_the_file_and_why() {
    use optspec::files::MemFiles;
    let files = MemFiles::new()
        .with("/etc/d.conf", "burst = 3\n")
        .with("/etc/bad.conf", "burst = 0\n")
        .with("/etc/big.conf", &"#".repeat(MAX_CONFIG_BYTES as usize + 1))
        .with_dir("/etc/dir");
    assert_eq!(load("/etc/d.conf", &files).map(|c| c.burst), Ok(3));
    let e = |p: &str| load(p, &files).map(|_| ()).unwrap_err();
    assert_eq!(
        e("/etc/bad.conf"),
        "config file /etc/bad.conf: line 1: burst = \"0\" is not valid: a whole number from 1 to 1000000000"
    );
    assert_eq!(
        e("/etc/big.conf"),
        "config file /etc/big.conf: larger than 1048576 bytes"
    );
    assert_eq!(
        e("/etc/dir"),
        "config file /etc/dir: Is a directory (os error 21)"
    );
    assert_eq!(
        e("/etc/no"),
        "config file /etc/no: No such file or directory (os error 2)"
    );
}

/// peer_allow takes networks; the unicast peers are added to it, so an
/// allow list never shuts out a configured peer.
#[test]
fn peer_allow_takes_networks_and_keeps_the_unicast_peers() {
    let c = parse(
        "peers = 127.0.0.1:9000\npeer_secret_file = /s\npeer_allow = 10.1.2.3/16, 192.0.2.7\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nets: Vec<String> = c.peer_allow.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.1.0.0/16", "192.0.2.7/32", "127.0.0.1/32"]);
    let g = parse("peer_group = 239.1.1.1:7000\npeer_secret_file = /s\n")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        g.peer_allow.is_empty(),
        "multicast without peer_allow: any sender"
    );
}

/// IPv4-mapped IPv6 peers and networks are taken as IPv4: sources are
/// checked canonical, so a mapped entry would never match.
#[test]
fn mapped_peers_and_networks_are_canonical() {
    let c = parse(
        "peers = [::ffff:127.0.0.1]:9000
peer_secret_file = /s
peer_allow = ::ffff:10.1.2.3/112
",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nets: Vec<String> = c.peer_allow.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.1.0.0/16", "127.0.0.1/32"]);
    assert_eq!(c.peers, [SocketAddr::from((Ipv4Addr::LOCALHOST, 9000))]);
}
