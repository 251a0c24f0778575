//! The configuration file: `name = value` lines, `#` comments, blank lines
//! ignored. Every setting, its default and what it allows is in
//! docs/dthrottled.md and `dthrottled.conf.example`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

/// What the daemon answers when a new tag finds no room in the tag table.
/// Since issue 21 tags with unreported hits or in debt make room for new
/// ones: no tag is ever busy, and the tag table refuses a new key only when
/// every key it looked at is busy (`crates/keyed`), so this never happens
/// (`max_tags` ≥ 1); kept so that configurations stay valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFull {
    Refuse,
    Serve,
}

/// A client silent this long is disconnected (`idle_timeout_ms`): long
/// enough that a client asking now and then keeps its connection, short
/// enough that abandoned connections give their place back.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Debug)]
pub struct Config {
    pub burst: u32,
    pub rate: f64,
    pub period: Duration,
    pub listen_tcp: Vec<SocketAddr>,
    pub listen_unix: Option<PathBuf>,
    pub unix_mode: u32,
    pub peers: Vec<SocketAddr>,
    pub peer_group: Option<SocketAddr>,
    pub peer_listen: SocketAddr,
    pub peer_interface: Ipv4Addr,
    /// Source networks accepted besides the unicast peers (empty, with no
    /// unicast peers: any sender; the MAC still applies).
    pub peer_allow: Vec<IpNet>,
    pub peer_secret_file: Option<PathBuf>,
    pub peer_name: String,
    pub replay_window: Duration,
    /// Peer processes whose replay windows are kept at once.
    pub peer_max_senders: usize,
    pub max_tags: usize,
    pub max_report_tags: usize,
    pub max_line: usize,
    pub max_connections: usize,
    pub write_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub on_full: OnFull,
    pub stats_interval: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            burst: 10,
            rate: 1.0,
            period: Duration::from_secs(1),
            listen_tcp: vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7411)],
            listen_unix: None,
            unix_mode: 0o660,
            peers: Vec::new(),
            peer_group: None,
            peer_listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 7412),
            peer_interface: Ipv4Addr::UNSPECIFIED,
            peer_allow: Vec::new(),
            peer_secret_file: None,
            peer_name: "dthrottle".into(),
            replay_window: Duration::from_secs(10),
            peer_max_senders: dthrottle::DEFAULT_MAX_SENDERS,
            max_tags: 100_000,
            max_report_tags: 10_000,
            max_line: 256,
            max_connections: 1024,
            write_timeout: Duration::from_secs(1),
            // Not 0 (never): a silent client would hold its place forever.
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            on_full: OnFull::Refuse,
            stats_interval: None,
        }
    }
}

impl Config {
    /// True when the daemon exchanges reports with peers.
    pub fn peering(&self) -> bool {
        !self.peers.is_empty() || self.peer_group.is_some()
    }
}

fn err(line: usize, name: &str, value: &str, allowed: &str) -> String {
    format!("line {line}: {name} = {value:?} is not valid: {allowed}")
}

fn num<T: std::str::FromStr>(line: usize, name: &str, v: &str, allowed: &str) -> Result<T, String> {
    v.parse().map_err(|_| err(line, name, v, allowed))
}

fn ranged(line: usize, name: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let allowed = format!("a whole number from {lo} to {hi}");
    let n: u64 = num(line, name, v, &allowed)?;
    if !(lo..=hi).contains(&n) {
        return Err(err(line, name, v, &allowed));
    }
    Ok(n)
}

fn list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `host:port` resolved now (first address); names are looked up once. An
/// IPv4-mapped IPv6 address is taken as the IPv4 one (sources are matched
/// canonical).
fn addr(line: usize, name: &str, v: &str) -> Result<SocketAddr, String> {
    v.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(peer::receiver::canonical_addr)
        .ok_or_else(|| {
            err(
                line,
                name,
                v,
                "HOST:PORT (an address or a name that resolves)",
            )
        })
}

fn millis(line: usize, name: &str, v: &str, lo: u64, hi: u64) -> Result<Duration, String> {
    Ok(Duration::from_millis(ranged(line, name, v, lo, hi)?))
}

/// Parses a configuration file's text; errors name the line, the setting,
/// the value and what is allowed.
pub fn parse(text: &str) -> Result<Config, String> {
    let mut c = Config::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let Some((name, v)) = l.split_once('=') else {
            return Err(format!("line {line}: {l:?} is not `name = value`"));
        };
        let (name, v) = (name.trim(), v.trim());
        match name {
            "burst" => c.burst = ranged(line, name, v, 1, 1_000_000_000)? as u32,
            "rate" => {
                let allowed = "tokens per second, a number > 0 and <= 1e9 (fractions allowed)";
                let r: f64 = num(line, name, v, allowed)?;
                if !(r > 0.0 && r <= 1e9) {
                    return Err(err(line, name, v, allowed));
                }
                c.rate = r;
            }
            "period_ms" => c.period = millis(line, name, v, 10, 3_600_000)?,
            "listen_tcp" => {
                c.listen_tcp = list(v)
                    .map(|a| addr(line, name, a))
                    .collect::<Result<_, _>>()?
            }
            "listen_unix" => c.listen_unix = (!v.is_empty()).then(|| PathBuf::from(v)),
            "unix_mode" => {
                c.unix_mode = u32::from_str_radix(v, 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| err(line, name, v, "octal permissions such as 660"))?
            }
            "peers" => {
                c.peers = list(v)
                    .map(|a| addr(line, name, a))
                    .collect::<Result<_, _>>()?
            }
            "peer_group" => {
                c.peer_group = if v.is_empty() {
                    None
                } else {
                    let a = addr(line, name, v)?;
                    if !matches!(a.ip(), IpAddr::V4(g) if g.is_multicast()) {
                        return Err(err(
                            line,
                            name,
                            v,
                            "an IPv4 multicast GROUP:PORT (224.0.0.0/4)",
                        ));
                    }
                    Some(a)
                }
            }
            "peer_listen" => c.peer_listen = addr(line, name, v)?,
            "peer_interface" => {
                c.peer_interface = num(line, name, v, "an IPv4 address of a local interface")?
            }
            "peer_allow" => {
                let allowed = "IP addresses or CIDR networks, comma-separated, at most 64";
                c.peer_allow = list(v)
                    .map(|a| {
                        a.parse::<IpNet>()
                            .or_else(|_| a.parse::<IpAddr>().map(IpNet::from))
                            .map(peer::receiver::canonical_net)
                            .map_err(|_| err(line, name, v, allowed))
                    })
                    .collect::<Result<_, _>>()?;
                if c.peer_allow.len() > 64 {
                    return Err(err(line, name, v, allowed));
                }
            }
            "peer_secret_file" => c.peer_secret_file = (!v.is_empty()).then(|| PathBuf::from(v)),
            "peer_name" => {
                if v.is_empty() || v.len() > peer::wire::MAX_GROUP_LEN {
                    return Err(err(line, name, v, "1 to 64 bytes"));
                }
                c.peer_name = v.into();
            }
            "replay_window_ms" => c.replay_window = millis(line, name, v, 100, 3_600_000)?,
            "peer_max_senders" => {
                let most = dthrottle::MAX_MAX_SENDERS as u64;
                c.peer_max_senders = ranged(line, name, v, 1, most)? as usize
            }
            "max_tags" => c.max_tags = ranged(line, name, v, 1, 100_000_000)? as usize,
            "max_report_tags" => c.max_report_tags = ranged(line, name, v, 1, 10_000_000)? as usize,
            "max_line" => c.max_line = ranged(line, name, v, 1, 65_536)? as usize,
            "max_connections" => c.max_connections = ranged(line, name, v, 1, 100_000)? as usize,
            "write_timeout_ms" => c.write_timeout = millis(line, name, v, 1, 600_000)?,
            "idle_timeout_ms" => {
                let d = millis(line, name, v, 0, 86_400_000)?;
                c.idle_timeout = (!d.is_zero()).then_some(d);
            }
            "on_full" => {
                c.on_full = match v {
                    "refuse" => OnFull::Refuse,
                    "serve" => OnFull::Serve,
                    _ => return Err(err(line, name, v, "refuse or serve")),
                }
            }
            "stats_interval_s" => {
                let s = ranged(line, name, v, 0, 86_400)?;
                c.stats_interval = (s > 0).then(|| Duration::from_secs(s));
            }
            _ => return Err(format!("line {line}: unknown setting {name:?}")),
        }
    }
    if c.listen_tcp.is_empty() && c.listen_unix.is_none() {
        return Err("nothing to listen on: set listen_tcp or listen_unix".into());
    }
    if !c.peers.is_empty() && c.peer_group.is_some() {
        return Err(
            "peers and peer_group exclude each other: give unicast peers or one multicast group"
                .into(),
        );
    }
    if c.peering() && c.peer_secret_file.is_none() {
        return Err("peers or peer_group is set but peer_secret_file is not: peer reports must be authenticated".into());
    }
    // The unicast peers may always send, besides peer_allow.
    for p in &c.peers {
        let n = IpNet::from(p.ip());
        if !c.peer_allow.contains(&n) {
            c.peer_allow.push(n);
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
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
        let c = parse(include_str!("../dthrottled.conf.example")).unwrap_or_else(|e| panic!("{e}"));
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
}
