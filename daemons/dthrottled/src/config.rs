//! The configuration file: `name = value` lines, `#` comments, blank lines
//! ignored. Every setting, its default and what it allows is in
//! docs/dthrottled.md and `dthrottled.conf.example`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use optspec::files::Files;
use optspec::{find, value, Names, Opt};

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

fn list_of_addrs(line: usize, name: &str, v: &str) -> Result<Vec<SocketAddr>, String> {
    list(v).map(|a| addr(line, name, a)).collect()
}

/// A path setting; empty: none.
fn path(v: &str) -> Option<PathBuf> {
    (!v.is_empty()).then(|| PathBuf::from(v))
}

type R = Result<(), String>;

/// Every setting: the single source of their names. The setter gets the
/// line number, for its errors.
static SETTINGS: &[Opt<Config, usize, String>] = &[
    Opt::value("burst", "tokens a full bucket holds", |c, v, &l| {
        c.burst = ranged(l, "burst", v, 1, 1_000_000_000)? as u32;
        Ok(())
    }),
    Opt::value("rate", "tokens added per second", set_rate),
    Opt::value("period_ms", "how often hits are reported", |c, v, &l| {
        c.period = millis(l, "period_ms", v, 10, 3_600_000)?;
        Ok(())
    }),
    Opt::value("listen_tcp", "TCP addresses to listen on", |c, v, &l| {
        c.listen_tcp = list_of_addrs(l, "listen_tcp", v)?;
        Ok(())
    }),
    Opt::value(
        "listen_unix",
        "a Unix socket path to listen on",
        |c, v, _| {
            c.listen_unix = path(v);
            Ok(())
        },
    ),
    Opt::value(
        "unix_mode",
        "the Unix socket's permissions (octal)",
        |c, v, &l| {
            c.unix_mode = u32::from_str_radix(v, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| err(l, "unix_mode", v, "octal permissions such as 660"))?;
            Ok(())
        },
    ),
    Opt::value("peers", "unicast peers", |c, v, &l| {
        c.peers = list_of_addrs(l, "peers", v)?;
        Ok(())
    }),
    Opt::value(
        "peer_group",
        "an IPv4 multicast group of peers",
        set_peer_group,
    ),
    Opt::value(
        "peer_listen",
        "the UDP address reports arrive at",
        |c, v, &l| {
            c.peer_listen = addr(l, "peer_listen", v)?;
            Ok(())
        },
    ),
    Opt::value(
        "peer_interface",
        "the interface of the multicast group",
        |c, v, &l| {
            c.peer_interface = num(
                l,
                "peer_interface",
                v,
                "an IPv4 address of a local interface",
            )?;
            Ok(())
        },
    ),
    Opt::value(
        "peer_allow",
        "senders accepted besides the unicast peers",
        set_peer_allow,
    ),
    Opt::value("peer_secret_file", "the peers' shared secret", |c, v, _| {
        c.peer_secret_file = path(v);
        Ok(())
    }),
    Opt::value("peer_name", "the exchange name", |c, v, &l| {
        // Not '-' first: it names the same exchange as rate_limit's
        // --group, which refuses that (no name looks like an option).
        if v.is_empty() || v.len() > peer::wire::MAX_GROUP_LEN || v.starts_with('-') {
            return Err(err(
                l,
                "peer_name",
                v,
                "1 to 64 bytes, not starting with '-'",
            ));
        }
        c.peer_name = v.into();
        Ok(())
    }),
    Opt::value(
        "replay_window_ms",
        "largest clock difference between peers",
        |c, v, &l| {
            c.replay_window = millis(l, "replay_window_ms", v, 100, 3_600_000)?;
            Ok(())
        },
    ),
    Opt::value(
        "peer_max_senders",
        "peer processes tracked at once",
        |c, v, &l| {
            let most = dthrottle::MAX_MAX_SENDERS as u64;
            c.peer_max_senders = ranged(l, "peer_max_senders", v, 1, most)? as usize;
            Ok(())
        },
    ),
    Opt::value("max_tags", "tags held at once", |c, v, &l| {
        c.max_tags = ranged(l, "max_tags", v, 1, 100_000_000)? as usize;
        Ok(())
    }),
    Opt::value("max_report_tags", "tags per report", |c, v, &l| {
        c.max_report_tags = ranged(l, "max_report_tags", v, 1, 10_000_000)? as usize;
        Ok(())
    }),
    Opt::value("max_line", "longest tag in bytes", |c, v, &l| {
        c.max_line = ranged(l, "max_line", v, 1, 65_536)? as usize;
        Ok(())
    }),
    Opt::value("max_connections", "connections open at once", |c, v, &l| {
        c.max_connections = ranged(l, "max_connections", v, 1, 100_000)? as usize;
        Ok(())
    }),
    Opt::value(
        "write_timeout_ms",
        "a client not reading is closed after this",
        |c, v, &l| {
            c.write_timeout = millis(l, "write_timeout_ms", v, 1, 600_000)?;
            Ok(())
        },
    ),
    Opt::value(
        "idle_timeout_ms",
        "a silent client is closed after this; 0: never",
        |c, v, &l| {
            let d = millis(l, "idle_timeout_ms", v, 0, 86_400_000)?;
            c.idle_timeout = (!d.is_zero()).then_some(d);
            Ok(())
        },
    ),
    Opt::value(
        "on_full",
        "a new tag when no room is left: refuse or serve",
        |c, v, &l| {
            let words = [("refuse", OnFull::Refuse), ("serve", OnFull::Serve)];
            c.on_full =
                value::word(v, &words).ok_or_else(|| err(l, "on_full", v, "refuse or serve"))?;
            Ok(())
        },
    ),
    Opt::value(
        "stats_interval_s",
        "seconds between stats lines; 0: never",
        |c, v, &l| {
            let s = ranged(l, "stats_interval_s", v, 0, 86_400)?;
            c.stats_interval = (s > 0).then(|| Duration::from_secs(s));
            Ok(())
        },
    ),
];

fn tables() -> [&'static dyn Names; 1] {
    [&SETTINGS]
}

fn set_rate(c: &mut Config, v: &str, &line: &usize) -> R {
    let allowed = "tokens per second, a number > 0 and <= 1e9 (fractions allowed)";
    let r: f64 = num(line, "rate", v, allowed)?;
    if !(r > 0.0 && r <= 1e9) {
        return Err(err(line, "rate", v, allowed));
    }
    c.rate = r;
    Ok(())
}

fn set_peer_group(c: &mut Config, v: &str, &line: &usize) -> R {
    c.peer_group = if v.is_empty() {
        None
    } else {
        let a = addr(line, "peer_group", v)?;
        if !matches!(a.ip(), IpAddr::V4(g) if g.is_multicast()) {
            return Err(err(
                line,
                "peer_group",
                v,
                "an IPv4 multicast GROUP:PORT (224.0.0.0/4)",
            ));
        }
        Some(a)
    };
    Ok(())
}

fn set_peer_allow(c: &mut Config, v: &str, &line: &usize) -> R {
    let allowed = "IP addresses or CIDR networks, comma-separated, at most 64";
    c.peer_allow = list(v)
        .map(|a| {
            value::cidr(a)
                .map(peer::receiver::canonical_net)
                .ok_or_else(|| err(line, "peer_allow", v, allowed))
        })
        .collect::<Result<_, _>>()?;
    if c.peer_allow.len() > 64 {
        return Err(err(line, "peer_allow", v, allowed));
    }
    Ok(())
}

/// Largest configuration file read (the example, with every setting and
/// its comment, is 2 KB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads and parses the configuration file at `path`; an error names the
/// file as given, then why (as `std::fs::read_to_string` worded it, or
/// "larger than N bytes").
pub fn load(path: &str, files: &dyn Files) -> Result<Config, String> {
    let file = files
        .read(Path::new(path), MAX_CONFIG_BYTES)
        .map_err(|e| format!("config file {path}: {}", e.std_wording()))?;
    parse(&file.text).map_err(|e| format!("config file {path}: {e}"))
}

/// Parses a configuration file's text; errors name the line, the setting,
/// the value and what is allowed.
pub fn parse(text: &str) -> Result<Config, String> {
    let tables = tables();
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
        let Some((_, index, _)) = find(&tables, name) else {
            return Err(format!("line {line}: unknown setting {name:?}"));
        };
        SETTINGS[index].apply(&mut c, Some(v), &line)?;
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
mod tests;
