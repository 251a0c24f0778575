//! The client's address behind trusted proxies, one implementation for
//! rate_limit.so (`--key=ip`) and ip_throttle.so.
//!
//! A proxy (a load balancer, a CDN) connects on its clients' behalf and
//! appends the address it received the request from to a forwarding header.
//! Only the entries the trusted proxies appended are believed: walking the
//! chain from the right, the client is the first address that is not a
//! trusted proxy. The left-most entries are whatever the client wrote.
//! A client the trusted proxies do not name is [`Client::Unknown`], never
//! the proxy: each plugin keeps all such clients apart from every address.
//!
//! Everything here reads client-controlled bytes: the walk is linear in
//! them and bounded ([`MAX_FORWARDED_BYTES`], [`MAX_FORWARDED_HOPS`]).

#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Most addresses of a forwarding chain that are looked at, from the right.
pub const MAX_FORWARDED_HOPS: usize = 32;
/// Most bytes of a forwarding header read: its **last** 8 KB, where the
/// trusted proxies' entries are (the start is whatever the client wrote).
pub const MAX_FORWARDED_BYTES: usize = 8 * 1024;

/// The header trusted proxies append the client's address to
/// (`--forwarded-header`). Only that one is read: a proxy that writes one
/// passes the other through from the client untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardedHeader {
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=…`.
    Forwarded,
}

impl ForwardedHeader {
    /// `X-Forwarded-For` or `Forwarded`, in any case.
    pub fn parse(v: &str) -> Option<ForwardedHeader> {
        match v.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Some(ForwardedHeader::XForwardedFor),
            "forwarded" => Some(ForwardedHeader::Forwarded),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "X-Forwarded-For",
            ForwardedHeader::Forwarded => "Forwarded",
        }
    }
}

/// Parses `--trusted-proxies=CIDR[,CIDR…]` (a bare address is a /32 or
/// /128). An error names the part that is not an address or CIDR.
pub fn parse_trusted(value: &str) -> Result<Vec<IpNet>, String> {
    value
        .split(',')
        .map(str::trim)
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map(|n| n.trunc())
                .map_err(|_| format!("{} is not an IP address or CIDR", quoting::quote(s)))
        })
        .collect()
}

pub use netaddr::canonical;

/// Whether `ip` (taken canonical) is in one of the `trusted` networks.
pub fn trusts(trusted: &[IpNet], ip: IpAddr) -> bool {
    let ip = canonical(ip);
    trusted.iter().any(|n| n.contains(&ip))
}

/// Who the client of a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Its address (canonical).
    Addr(IpAddr),
    /// Behind a trusted proxy that does not name it (`unknown`, `_hidden`,
    /// no header, an entry that is not an address). Never the proxy's own
    /// address: that would exempt or ban everyone behind the proxy together
    /// with it.
    Unknown,
}

impl Client {
    /// The address, if the client has one.
    pub fn addr(self) -> Option<IpAddr> {
        match self {
            Client::Addr(ip) => Some(ip),
            Client::Unknown => None,
        }
    }
}

impl From<IpAddr> for Client {
    fn from(ip: IpAddr) -> Client {
        Client::Addr(ip)
    }
}

/// The address, or `unknown`.
impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Addr(ip) => ip.fmt(f),
            Client::Unknown => f.write_str("unknown"),
        }
    }
}

/// The client of a request from `remote`: `remote` (canonical), unless it
/// is a trusted proxy; then the `header` chain is walked from the right:
///
/// - the first address that is not a trusted proxy is the client;
/// - if every hop read is a trusted address (the chain ends, or
///   [`MAX_FORWARDED_HOPS`] are read), the left-most one read is (a client
///   inside the trusted network);
/// - a missing header, or a hop that is not an address (`unknown`,
///   `_hidden`, garbage, an element without `for=`, the cut-off first entry
///   of a chain longer than [`MAX_FORWARDED_BYTES`]) met first:
///   [`Client::Unknown`].
///
/// `read` gives every field of a header name joined with ", " (`None`: no
/// such field); it is called only for a trusted remote.
pub fn client_ip(
    trusted: &[IpNet],
    header: ForwardedHeader,
    remote: IpAddr,
    read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
) -> Client {
    let remote = canonical(remote);
    if trusted.is_empty() || !trusts(trusted, remote) {
        return Client::Addr(remote);
    }
    let Some(chain) = read(header.name()) else {
        return Client::Unknown;
    };
    let start = chain.len().saturating_sub(MAX_FORWARDED_BYTES);
    let tail = &chain[start..];
    // A cut inside an entry leaves a fragment that may still parse (the
    // end of `10.0.0.19` is `0.0.0.19`): it is not an address.
    let cut = start > 0 && chain[start - 1] != b',';
    let tail = if cut {
        match tail.iter().position(|&b| b == b',') {
            Some(i) => &tail[i + 1..],
            None => return Client::Unknown,
        }
    } else {
        tail
    };
    let rfc7239 = header == ForwardedHeader::Forwarded;
    let mut client = None;
    let mut hops = 0;
    for hop in tail.rsplit(|&b| b == b',').take(MAX_FORWARDED_HOPS) {
        hops += 1;
        let addr = if rfc7239 {
            forwarded_for(hop)
        } else {
            parse_ip(hop.trim_ascii())
        };
        let Some(addr) = addr.map(canonical) else {
            return Client::Unknown;
        };
        if !trusts(trusted, addr) {
            return Client::Addr(addr);
        }
        client = Some(addr);
    }
    match client {
        // Trusted hops up to the cut, whose fragment would be read next.
        Some(_) if cut && hops < MAX_FORWARDED_HOPS => Client::Unknown,
        Some(addr) => Client::Addr(addr),
        None => Client::Unknown,
    }
}

/// An address as it appears in a forwarding header: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`, optionally quoted.
fn parse_ip(b: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(b).ok()?.trim_matches('"');
    if let Some(rest) = s.strip_prefix('[') {
        return rest
            .split_once(']')?
            .0
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    // a.b.c.d:port
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` address of one `Forwarded` element (RFC 7239), e.g.
/// `for=192.0.2.60;proto=http;by=203.0.113.43` or `for="[2001:db8::1]:80"`.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        k.eq_ignore_ascii_case(b"for")
            .then(|| parse_ip(v[1..].trim_ascii()))
            .flatten()
    })
}

#[cfg(test)]
mod tests;
