//! Store addresses as operators write them in `--store`, parsed in one
//! place for every plugin, and the addresses they name. A leaf: the option
//! parsers (pure crates) use it without linking a store client, and
//! `store`'s own modules take the address types from here (re-exported as
//! `store::url` and `store::redis::{Addr, Target}`).

#![forbid(unsafe_code)]

/// Where the server is: `redis://HOST:PORT/DB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addr {
    pub host: String,
    pub port: u16,
    pub db: i64,
}

impl Addr {
    pub fn url(&self) -> String {
        format!("redis://{}/{}", self.host_port(), self.db)
    }

    /// `HOST:PORT` (`[V6]:PORT`).
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Where the data is: one server (`redis://`) or a Cluster (`redis+cluster://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Node(Addr),
    /// Seed nodes, tried in order for the slot map (a Cluster has only db 0).
    Cluster(Vec<Addr>),
}

impl Target {
    /// Written back normalised (for diags.log, and to share a client).
    pub fn url(&self) -> String {
        match self {
            Target::Node(a) => a.url(),
            Target::Cluster(seeds) => {
                let s: Vec<String> = seeds.iter().map(Addr::host_port).collect();
                format!("redis+cluster://{}", s.join(","))
            }
        }
    }
}

impl From<&Addr> for Target {
    fn from(a: &Addr) -> Target {
        Target::Node(a.clone())
    }
}

impl From<&Target> for Target {
    fn from(t: &Target) -> Target {
        t.clone()
    }
}

/// A parsed `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// One server or a Cluster.
    Redis(Target),
    /// `HOST:PORT` of each server, in the order given.
    Memcached(Vec<String>),
}

impl StoreUrl {
    /// The address written back normalised (for diags.log).
    pub fn url(&self) -> String {
        match self {
            StoreUrl::Redis(a) => a.url(),
            StoreUrl::Memcached(s) => format!("memcached://{}", s.join(",")),
        }
    }
}

/// Why a value is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlError {
    /// Malformed: what is allowed.
    Invalid(&'static str),
    /// Well-formed but not built (e.g. TLS): why.
    Unsupported(&'static str),
}

pub const REDIS_ALLOWED: &str = "redis://HOST[:PORT][/DB] or redis+cluster://HOST[:PORT][,HOST[:PORT]...] (up to 64 seeds); HOST a name, IPv4 or [IPv6]; PORT 1-65535 (6379); DB 0-65535 (0)";
pub const CLUSTER_ALLOWED: &str = "redis+cluster://HOST[:PORT][,HOST[:PORT]...]: Redis Cluster seed nodes (at most 64) with host names, IPv4 addresses or [IPv6] addresses and ports from 1 to 65535 (default 6379), and no /DB (a Redis Cluster has only database 0)";
pub const MEMCACHED_ALLOWED: &str = "memcached://HOST:PORT[,HOST:PORT...] (at most 64 servers) with host names, IPv4 addresses or [IPv6] addresses and ports from 1 to 65535";
pub const EITHER_ALLOWED: &str = "memcached://HOST:PORT[,HOST:PORT...] (at most 64 servers), redis://HOST[:PORT][/DB] or redis+cluster://HOST[:PORT][,HOST[:PORT]...] (Redis Cluster seed nodes, at most 64), with host names, IPv4 addresses or [IPv6] addresses, ports from 1 to 65535 (Redis: default 6379) and a Redis database from 0 to 65535 (default 0)";

const REDIS_DEFAULT_PORT: u16 = 6379;
const MAX_DB: i64 = 65_535;
pub const MAX_SERVERS: usize = 64;

/// `redis://…` or `memcached://…` (also `memcache://`).
pub fn parse(value: &str) -> Result<StoreUrl, UrlError> {
    if value.starts_with("memcache://") || value.starts_with("memcached://") {
        return memcached(value)
            .map(StoreUrl::Memcached)
            .map_err(|_| UrlError::Invalid(EITHER_ALLOWED));
    }
    match redis(value) {
        Ok(a) => Ok(StoreUrl::Redis(a)),
        // A cluster's own message says what it lacks (e.g. no /DB).
        Err(UrlError::Invalid(CLUSTER_ALLOWED)) => Err(UrlError::Invalid(CLUSTER_ALLOWED)),
        Err(UrlError::Invalid(_)) => Err(UrlError::Invalid(EITHER_ALLOWED)),
        Err(e) => Err(e),
    }
}

fn host_ok(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

fn port_ok(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<u16>().ok().filter(|&n| n > 0)
}

/// `redis://HOST[:PORT][/DB]` or `redis+cluster://HOST[:PORT][,HOST[:PORT]...]`.
pub fn redis(value: &str) -> Result<Target, UrlError> {
    if let Some(rest) = value.strip_prefix("redis+cluster://") {
        let bad = UrlError::Invalid(CLUSTER_ALLOWED);
        let seeds: Vec<&str> = rest.split(',').collect();
        if seeds.len() > MAX_SERVERS || rest.contains('/') {
            return Err(bad);
        }
        return seeds
            .into_iter()
            .map(|s| host_port(s, 0).ok_or(bad.clone()))
            .collect::<Result<Vec<Addr>, UrlError>>()
            .map(Target::Cluster);
    }
    if value.starts_with("rediss://") {
        return Err(UrlError::Unsupported(
            "TLS (rediss://) is not built yet: use redis://HOST:PORT[/DB] or \
             redis+cluster://HOST:PORT[,HOST:PORT...]",
        ));
    }
    let bad = UrlError::Invalid(REDIS_ALLOWED);
    let rest = value.strip_prefix("redis://").ok_or(bad.clone())?;
    let (hostport, db) = match rest.split_once('/') {
        Some((hp, "")) => (hp, 0),
        Some((hp, db)) => {
            let ok = db.len() <= 5 && db.bytes().all(|b| b.is_ascii_digit());
            match db.parse::<i64>() {
                Ok(n) if ok && n <= MAX_DB => (hp, n),
                _ => return Err(bad),
            }
        }
        None => (rest, 0),
    };
    host_port(hostport, db).map(Target::Node).ok_or(bad)
}

/// `HOST[:PORT]` (`[V6][:PORT]`), the port 6379 if not given.
fn host_port(hostport: &str, db: i64) -> Option<Addr> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        match after {
            "" => (h, None),
            _ => (h, Some(after.strip_prefix(':')?)),
        }
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !host.contains(':') && !host_ok(host) {
        return None;
    }
    let port = match port {
        None => REDIS_DEFAULT_PORT,
        Some(p) => port_ok(p)?,
    };
    Some(Addr {
        host: host.to_owned(),
        port,
        db,
    })
}

/// `memcached://HOST:PORT[,HOST:PORT...]` (also `memcache://`): the
/// servers, in the order given (every proxy must list them in the same
/// order: a key's server is chosen by its hash over the list).
pub fn memcached(value: &str) -> Result<Vec<String>, UrlError> {
    let bad = UrlError::Invalid(MEMCACHED_ALLOWED);
    let rest = value
        .strip_prefix("memcached://")
        .or_else(|| value.strip_prefix("memcache://"))
        .ok_or(bad.clone())?;
    let servers: Vec<String> = rest.split(',').map(str::to_owned).collect();
    if servers.len() > MAX_SERVERS {
        return Err(bad);
    }
    for s in &servers {
        let ok = s.rsplit_once(':').is_some_and(|(h, p)| {
            let host = match h.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
                None => host_ok(h),
            };
            host && port_ok(p).is_some()
        });
        if !ok {
            return Err(bad);
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests;
