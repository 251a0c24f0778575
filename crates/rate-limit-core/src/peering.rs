//! The peer exchange options of a keyed rate limit (`--peers`,
//! `--peer-group`, `--peer-listen`, `--peer-period`, `--peer-secret-file`,
//! `--peer-max-tags`) and the peer tag that names a key across instances.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use limits::quote::quote;

use crate::key::{KeySpec, Source};
use crate::options::{invalid, OptionError};

/// The options named `peer…` (the parser hands them here, validated later).
pub const NAMES: &[&str] = &[
    "peers",
    "peer-group",
    "peer-listen",
    "peer-period",
    "peer-secret-file",
    "peer-max-tags",
];

pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 7412);
pub const DEFAULT_PERIOD_MS: u64 = 1000;
pub const MIN_PERIOD_MS: u64 = 10;
pub const MAX_PERIOD_MS: u64 = 60_000;
pub const DEFAULT_MAX_TAGS: usize = 10_000;
pub const MAX_MAX_TAGS: u64 = 1_000_000;
/// Longest `--peer-secret-file`.
const MAX_PATH: usize = 4096;
/// Most unicast peers (each report goes to each of them).
pub const MAX_PEERS: usize = 64;

/// Where a peered limiter exchanges reports, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerOptions {
    /// Unicast peers (`--peers`).
    pub peers: Vec<SocketAddr>,
    /// An IPv4 multicast group (`--peer-group`).
    pub group: Option<SocketAddr>,
    /// The UDP address reports arrive at (`--peer-listen`).
    pub listen: SocketAddr,
    /// How often this limiter reports its hits (`--peer-period`).
    pub period_ms: u64,
    /// The shared secret's file, as written (relative to ATS's config dir).
    pub secret_file: String,
    /// Most tags per report (`--peer-max-tags`).
    pub max_tags: usize,
}

impl PeerOptions {
    /// The process-wide socket's settings, which every peered rule must
    /// share: `(option, value)`.
    pub fn socket_options(&self) -> Vec<(&'static str, String)> {
        let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
        vec![
            ("peers", peers.join(",")),
            (
                "peer-group",
                self.group.map_or_else(String::new, |g| g.to_string()),
            ),
            ("peer-listen", self.listen.to_string()),
            ("peer-secret-file", self.secret_file.clone()),
        ]
    }

    /// One line, for the log and for group agreement.
    pub fn describe(&self) -> String {
        let to = match self.group {
            Some(g) => format!("group {g}"),
            None => self
                .peers
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(","),
        };
        format!(
            "{to} listen {} period {}ms secret {} max-tags {}",
            self.listen, self.period_ms, self.secret_file, self.max_tags
        )
    }
}

fn addr(name: &str, value: &str) -> Result<SocketAddr, OptionError> {
    let bad = || {
        invalid(
            name,
            value,
            "HOST:PORT (an IP address or a name, and a port)",
        )
    };
    let mut it = value.trim().to_socket_addrs().map_err(|_| bad())?;
    // IPv4 first: the multicast and loopback cases are IPv4.
    let all: Vec<SocketAddr> = it.by_ref().take(16).collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(bad)
}

fn uint(name: &str, value: &str, min: u64, max: u64) -> Result<u64, OptionError> {
    let allowed = || format!("an integer from {min} to {max}");
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(name, value, &allowed()));
    }
    value
        .parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| invalid(name, value, &allowed()))
}

/// Validates the `peer…` options given (`raw`: name and value). `None` when
/// none was given. Peering needs `--key`, `--rate` and `--group` (the name
/// reports are exchanged under).
pub fn parse(
    raw: &[(&'static str, String)],
    has_key: bool,
    has_rate: bool,
    group: Option<&str>,
) -> Result<Option<PeerOptions>, OptionError> {
    if raw.is_empty() {
        return Ok(None);
    }
    let get = |n: &str| raw.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
    let mut o = PeerOptions {
        peers: Vec::new(),
        group: None,
        listen: DEFAULT_LISTEN,
        period_ms: DEFAULT_PERIOD_MS,
        secret_file: String::new(),
        max_tags: DEFAULT_MAX_TAGS,
    };
    // Each value first, so that a bad value is named as such.
    for (name, v) in raw {
        match *name {
            "peers" => {
                for part in v.split(',') {
                    let a = addr("peers", part).map_err(|_| {
                        invalid(
                            "peers",
                            v,
                            &format!(
                                "HOST:PORT, comma-separated ({} is not one)",
                                quote(part.trim())
                            ),
                        )
                    })?;
                    if !o.peers.contains(&a) {
                        o.peers.push(a);
                    }
                }
                if o.peers.len() > MAX_PEERS {
                    return Err(invalid(
                        "peers",
                        v,
                        &format!("at most {MAX_PEERS} HOST:PORT"),
                    ));
                }
            }
            "peer-group" => {
                let g = addr("peer-group", v)?;
                if !matches!(g.ip(), IpAddr::V4(ip) if ip.is_multicast()) {
                    return Err(invalid(
                        "peer-group",
                        v,
                        "an IPv4 multicast GROUP:PORT (224.0.0.0/4)",
                    ));
                }
                o.group = Some(g);
            }
            "peer-listen" => o.listen = addr("peer-listen", v)?,
            "peer-period" => o.period_ms = uint("peer-period", v, MIN_PERIOD_MS, MAX_PERIOD_MS)?,
            "peer-max-tags" => o.max_tags = uint("peer-max-tags", v, 1, MAX_MAX_TAGS)? as usize,
            _ => {
                if v.is_empty() || v.len() > MAX_PATH || v.chars().any(char::is_control) {
                    return Err(invalid(
                        "peer-secret-file",
                        v,
                        "a file name of 1 to 4096 bytes (relative to the config dir) holding the shared secret",
                    ));
                }
                o.secret_file = v.clone();
            }
        }
    }
    match (get("peers"), get("peer-group")) {
        (Some(_), Some(_)) => {
            return Err(OptionError(
                "--peers and --peer-group exclude each other: give unicast peers or one multicast group"
                    .to_owned(),
            ))
        }
        (None, None) => {
            let (name, _) = raw[0];
            return Err(OptionError(format!(
                "--{name} needs --peers=HOST:PORT,… or --peer-group=GROUP:PORT (who to exchange with)"
            )));
        }
        _ => {}
    }
    if let (Some(g), None) = (o.group, get("peer-listen")) {
        // Every member of a multicast group listens on its port.
        o.listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), g.port());
    }
    if o.secret_file.is_empty() {
        return Err(OptionError(
            "--peers/--peer-group need --peer-secret-file=FILE: every datagram is authenticated with the shared secret"
                .to_owned(),
        ));
    }
    if !has_key || !has_rate {
        return Err(OptionError(
            "--peers/--peer-group need --key and --rate: the exchange shares per-client rate buckets"
                .to_owned(),
        ));
    }
    if group.is_none() {
        return Err(OptionError(
            "--peers/--peer-group need --group=NAME: reports are exchanged under the group name, which peers (and dthrottled's peer_name) must share"
                .to_owned(),
        ));
    }
    Ok(Some(o))
}

/// Turns `key` (the bytes [`KeySpec::key`] wrote) into its peer tag, in
/// place: the name every peer uses for the client.
///
/// - One source: its value as text: `ip` as the address (`192.0.2.7`;
///   aggregated addresses as `2001:db8::/64`), a header, cookie or query
///   value as is. That is what a `dthrottled` client would send.
/// - Several sources: the key bytes themselves (each part tagged and
///   length-prefixed, so no two combinations collide).
/// - Empty (a request without its key, `--key-missing=shared`): stays
///   empty, and is never exchanged.
/// - Over 255 bytes: `sha256:` and the hex digest (as `dthrottled` does).
pub fn to_peer_tag(spec: &KeySpec, key: &mut Vec<u8>) {
    if key.len() < 3 || spec.sources.len() != 1 {
        shorten(key);
        return;
    }
    key.drain(..3);
    if spec.sources[0] == Source::Ip {
        let text = match key.len() {
            4 => {
                let a = Ipv4Addr::from(<[u8; 4]>::try_from(&key[..]).unwrap_or_default());
                ip_text(IpAddr::V4(a), spec.v4_prefix, 32)
            }
            16 => {
                let a = Ipv6Addr::from(<[u8; 16]>::try_from(&key[..]).unwrap_or_default());
                ip_text(IpAddr::V6(a), spec.v6_prefix, 128)
            }
            _ => return,
        };
        key.clear();
        key.extend_from_slice(text.as_bytes());
    }
    shorten(key);
}

fn ip_text(ip: IpAddr, prefix: u8, full: u8) -> String {
    if prefix >= full {
        ip.to_string()
    } else {
        format!("{ip}/{prefix}")
    }
}

fn shorten(key: &mut Vec<u8>) {
    if key.len() > dthrottle::MAX_TAG_LEN {
        let long = dthrottle::long_tag(key).into_owned();
        *key = long;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{ForwardedHeader, KeySpec};

    fn spec(sources: Vec<Source>) -> KeySpec {
        KeySpec {
            sources,
            v4_prefix: 32,
            v6_prefix: 64,
            trusted: Vec::new(),
            forwarded: ForwardedHeader::XForwardedFor,
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
        assert_eq!((o.period_ms, o.max_tags), (1000, 10_000));
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
}
