//! Store addresses as operators write them in `--store`, parsed in one
//! place for every plugin.

use crate::redis::Addr;

/// A parsed `--store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Redis(Addr),
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
    /// Well-formed but not built (e.g. Redis Cluster): why.
    Unsupported(&'static str),
}

pub const REDIS_ALLOWED: &str = "redis://HOST[:PORT][/DB] with a host name, IPv4 address or [IPv6] address, a port from 1 to 65535 (default 6379) and a database from 0 to 65535 (default 0)";
pub const MEMCACHED_ALLOWED: &str = "memcached://HOST:PORT[,HOST:PORT...] (at most 64 servers) with host names, IPv4 addresses or [IPv6] addresses and ports from 1 to 65535";
pub const EITHER_ALLOWED: &str = "memcached://HOST:PORT[,HOST:PORT...] (at most 64 servers) or redis://HOST[:PORT][/DB], with host names, IPv4 addresses or [IPv6] addresses, ports from 1 to 65535 (Redis: default 6379) and a Redis database from 0 to 65535 (default 0)";

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

/// `redis://HOST[:PORT][/DB]`.
pub fn redis(value: &str) -> Result<Addr, UrlError> {
    let bad = UrlError::Invalid(REDIS_ALLOWED);
    if value.starts_with("redis+cluster://") || value.starts_with("rediss://") {
        return Err(UrlError::Unsupported(
            "this version speaks to one Redis server (redis://HOST:PORT[/DB]); Redis Cluster \
             and TLS are not built yet",
        ));
    }
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
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or(bad.clone())?;
        h.parse::<std::net::Ipv6Addr>().map_err(|_| bad.clone())?;
        (h, after.strip_prefix(':'))
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !host.contains(':') && !host_ok(host) {
        return Err(bad);
    }
    let port = match port {
        None => REDIS_DEFAULT_PORT,
        Some(p) => port_ok(p).ok_or(bad)?,
    };
    Ok(Addr {
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
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        let a = |host: &str, port, db| Addr {
            host: host.into(),
            port,
            db,
        };
        assert_eq!(redis("redis://h"), Ok(a("h", 6379, 0)));
        assert_eq!(redis("redis://h:7000/3"), Ok(a("h", 7000, 3)));
        assert_eq!(redis("redis://[::1]:7000/"), Ok(a("::1", 7000, 0)));
        assert_eq!(redis("redis://10.0.0.1"), Ok(a("10.0.0.1", 6379, 0)));
        for bad in [
            "redis://",
            "redis://h:0",
            "redis://h:65536",
            "redis://h/65536",
            "redis://h/x",
            "redis://[zz]",
            "redis://h h",
            "http://h",
            "redis://h:+1",
        ] {
            assert_eq!(redis(bad), Err(UrlError::Invalid(REDIS_ALLOWED)), "{bad}");
        }
        assert!(matches!(
            redis("redis+cluster://h:1"),
            Err(UrlError::Unsupported(_))
        ));
        assert!(matches!(
            redis("rediss://h:1"),
            Err(UrlError::Unsupported(_))
        ));
    }

    #[test]
    fn memcached_urls() {
        assert_eq!(
            memcached("memcached://10.0.0.1:11211,cache.example:11212,[::1]:11213"),
            Ok(vec![
                "10.0.0.1:11211".into(),
                "cache.example:11212".into(),
                "[::1]:11213".into()
            ])
        );
        assert_eq!(memcached("memcache://h:1"), Ok(vec!["h:1".into()]));
        for bad in [
            "memcached://",
            "memcached://h",
            "memcached://h:0",
            "memcached://h:1,",
            "memcached://[zz]:1",
            "memcached://h h:1",
            "redis://h:1",
        ] {
            assert_eq!(
                memcached(bad),
                Err(UrlError::Invalid(MEMCACHED_ALLOWED)),
                "{bad}"
            );
        }
        let many = vec!["h:1"; MAX_SERVERS + 1].join(",");
        assert!(memcached(&format!("memcached://{many}")).is_err());
    }

    #[test]
    fn either() {
        assert!(matches!(
            parse("memcached://h:1"),
            Ok(StoreUrl::Memcached(_))
        ));
        assert!(matches!(parse("redis://h"), Ok(StoreUrl::Redis(_))));
        assert_eq!(
            parse("memcached://h"),
            Err(UrlError::Invalid(EITHER_ALLOWED))
        );
        assert_eq!(parse("ftp://h"), Err(UrlError::Invalid(EITHER_ALLOWED)));
        assert!(matches!(
            parse("redis+cluster://h:1"),
            Err(UrlError::Unsupported(_))
        ));
        assert_eq!(
            parse("redis://h:1/2").map(|u| u.url()),
            Ok("redis://h:1/2".into())
        );
    }
}
