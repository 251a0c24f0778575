//! The peer exchange options of a keyed rate limit (`--peers`,
//! `--peer-group`, `--peer-listen`, `--peer-period`, `--peer-secret-file`,
//! `--peer-max-tags`, `--peer-allow`, `--peer-interface`, `--peer-max-senders`) and the
//! peer tag that names a key across instances.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use ipnet::IpNet;

use limits::quote::quote;

use optspec::Opt;

use crate::key::{KeySpec, Source};
use crate::options::common::{apply_given, invalid, uint, OptionError, Order};

pub mod exchange;

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
/// Most `--peer-allow` networks (each datagram is checked against them).
pub const MAX_ALLOW: usize = 64;
/// `--peer-max-senders`: most peer processes whose replay windows are kept.
pub const DEFAULT_MAX_SENDERS: usize = dthrottle::DEFAULT_MAX_SENDERS;
pub const MAX_MAX_SENDERS: u64 = dthrottle::MAX_MAX_SENDERS as u64;

/// Where a peered limiter exchanges reports, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerOptions {
    /// Unicast peers (`--peers`).
    pub peers: Vec<SocketAddr>,
    /// An IPv4 multicast group (`--peer-group`).
    pub group: Option<SocketAddr>,
    /// The local IPv4 address the group is joined and sent on
    /// (`--peer-interface`; 0.0.0.0: the kernel picks by route).
    pub interface: Ipv4Addr,
    /// The UDP address reports arrive at (`--peer-listen`).
    pub listen: SocketAddr,
    /// How often this limiter reports its hits (`--peer-period`).
    pub period_ms: u64,
    /// The shared secret's file, as written (relative to ATS's config dir).
    pub secret_file: String,
    /// Most tags per report (`--peer-max-tags`).
    pub max_tags: usize,
    /// Networks whose datagrams are accepted besides the unicast peers'
    /// addresses (`--peer-allow`).
    pub allow: Vec<IpNet>,
    /// Most senders the socket tracks (`--peer-max-senders`).
    pub max_senders: usize,
}

impl PeerOptions {
    /// The process-wide socket's settings, which every peered rule must
    /// share: `(option, value)`.
    pub fn socket_options(&self) -> Vec<(&'static str, String)> {
        let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
        let nets: Vec<String> = self.allow.iter().map(|n| n.to_string()).collect();
        vec![
            ("peers", peers.join(",")),
            (
                "peer-group",
                self.group.map_or_else(String::new, |g| g.to_string()),
            ),
            ("peer-listen", self.listen.to_string()),
            ("peer-secret-file", self.secret_file.clone()),
            ("peer-allow", nets.join(",")),
            ("peer-interface", self.interface.to_string()),
            ("peer-max-senders", self.max_senders.to_string()),
        ]
    }

    /// The source networks the socket accepts: the unicast peers' addresses
    /// and `--peer-allow`; empty (any sender, the MAC still applies) only
    /// for a multicast group without `--peer-allow`.
    pub fn allowed_senders(&self) -> Vec<IpNet> {
        let mut v: Vec<IpNet> = self.peers.iter().map(|p| IpNet::from(p.ip())).collect();
        for n in &self.allow {
            if !v.contains(n) {
                v.push(*n);
            }
        }
        v
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
        let allow: Vec<String> = self.allow.iter().map(|n| n.to_string()).collect();
        let allow = if allow.is_empty() {
            String::new()
        } else {
            format!(" allow {}", allow.join(","))
        };
        format!(
            "{to} listen {} period {}ms secret {} max-tags {} max-senders {}{allow}",
            self.listen, self.period_ms, self.secret_file, self.max_tags, self.max_senders
        )
    }
}

/// The peer exchange options: the single source of their names.
pub static OPTIONS: &[Opt<PeerOptions, (), OptionError>] = &[
    Opt::value(
        "peers",
        "unicast peers of the exchange, HOST:PORT, comma-separated",
        set_peers,
    ),
    Opt::value(
        "peer-group",
        "or an IPv4 multicast GROUP:PORT",
        |o, v, _| {
            let g = addr("peer-group", v)?;
            if !matches!(g.ip(), IpAddr::V4(ip) if ip.is_multicast()) {
                return Err(invalid(
                    "peer-group",
                    v,
                    "an IPv4 multicast GROUP:PORT (224.0.0.0/4)",
                ));
            }
            o.group = Some(g);
            Ok(())
        },
    ),
    Opt::value(
        "peer-listen",
        "the UDP address reports arrive at",
        |o, v, _| {
            o.listen = addr("peer-listen", v)?;
            Ok(())
        },
    ),
    Opt::value(
        "peer-period",
        "how often this limiter reports its hits, ms",
        |o, v, _| {
            o.period_ms = uint("peer-period", v, MIN_PERIOD_MS, MAX_PERIOD_MS, "")?;
            Ok(())
        },
    ),
    Opt::value(
        "peer-secret-file",
        "the file holding the shared secret",
        |o, v, _| {
            if v.is_empty() || v.len() > MAX_PATH || v.chars().any(char::is_control) {
                return Err(invalid(
                    "peer-secret-file",
                    v,
                    "a file name of 1 to 4096 bytes (relative to the config dir) holding the shared secret",
                ));
            }
            o.secret_file = v.to_owned();
            Ok(())
        },
    ),
    Opt::value("peer-max-tags", "most client keys per report", |o, v, _| {
        o.max_tags = uint("peer-max-tags", v, 1, MAX_MAX_TAGS, "")? as usize;
        Ok(())
    }),
    Opt::value(
        "peer-allow",
        "source networks accepted besides the unicast peers",
        |o, v, _| {
            o.allow = nets(v)?;
            Ok(())
        },
    ),
    Opt::value(
        "peer-interface",
        "the local IPv4 address the multicast group is joined and sent on",
        |o, v, _| {
            o.interface = v.parse().map_err(|_| {
                invalid(
                    "peer-interface",
                    v,
                    "a local IPv4 address to join --peer-group on (default 0.0.0.0: by route)",
                )
            })?;
            Ok(())
        },
    ),
    Opt::value(
        "peer-max-senders",
        "peer processes whose replay windows the socket keeps",
        |o, v, _| {
            o.max_senders = uint("peer-max-senders", v, 1, MAX_MAX_SENDERS, "")? as usize;
            Ok(())
        },
    ),
];

fn set_peers(o: &mut PeerOptions, v: &str, _: &()) -> Result<(), OptionError> {
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
    Ok(())
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
        .map(netaddr::canonical_addr)
        .ok_or_else(bad)
}

/// `--peer-allow`: IP addresses or CIDR networks, comma-separated.
fn nets(value: &str) -> Result<Vec<IpNet>, OptionError> {
    let mut v = Vec::new();
    for part in optspec::value::list(value) {
        let n = optspec::value::cidr(part).ok_or_else(|| {
            invalid(
                "peer-allow",
                value,
                &format!(
                    "IP addresses or CIDR networks, comma-separated ({} is not one)",
                    quote(part)
                ),
            )
        })?;
        // Sources are checked canonical (IPv4-mapped IPv6 as IPv4).
        let n = netaddr::canonical_net(n);
        if !v.contains(&n) {
            v.push(n);
        }
    }
    if v.len() > MAX_ALLOW {
        return Err(invalid(
            "peer-allow",
            value,
            &format!("at most {MAX_ALLOW} addresses or networks"),
        ));
    }
    Ok(v)
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
        interface: Ipv4Addr::UNSPECIFIED,
        listen: DEFAULT_LISTEN,
        period_ms: DEFAULT_PERIOD_MS,
        secret_file: String::new(),
        max_tags: DEFAULT_MAX_TAGS,
        allow: Vec::new(),
        max_senders: DEFAULT_MAX_SENDERS,
    };
    // Each value first, in the order given, so that a bad value is named as such.
    apply_given(OPTIONS, raw, Order::Given, &mut o, &())?;
    if o.group.is_none() && !o.interface.is_unspecified() {
        return Err(OptionError(
            "--peer-interface needs --peer-group: it is where the multicast group is joined"
                .to_owned(),
        ));
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
///   aggregated addresses as `2001:db8::/64`; `unknown` for a client its
///   trusted proxy did not name), a header, cookie or query value as is.
///   That is what a `dthrottled` client would send.
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
            // Not left empty: that is --key-missing's key, never exchanged.
            0 => crate::key::Client::Unknown.to_string(),
            _ => return,
        };
        key.clear();
        key.extend_from_slice(text.as_bytes());
    }
    shorten(key);
}

/// A peer tag (from [`to_peer_tag`]) shown as [`KeySpec::display`] shows
/// the key it came from (`ip=192.0.2.7`, `header:X-User='alice'`), so that
/// `top` names a peered key in a form the per-key commands read back. A tag
/// made from a key too long for a datagram (`sha256:…`) is shown as is.
pub fn tag_name(spec: &KeySpec, tag: &[u8]) -> String {
    match spec.sources.as_slice() {
        _ if tag.starts_with(b"sha256:") => String::from_utf8_lossy(tag).into_owned(),
        [Source::Ip] => format!("ip={}", String::from_utf8_lossy(tag)),
        [src] => format!("{}={}", src.name(), quote(&String::from_utf8_lossy(tag))),
        // Several sources: the tag is the key's own bytes.
        _ => spec.display(tag),
    }
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
mod tests;
