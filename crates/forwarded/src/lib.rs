//! The client's address behind trusted proxies, one implementation for
//! rate_limit.so (`--key=ip`) and ip_throttle.so.
//!
//! A proxy (a load balancer, a CDN) connects on its clients' behalf and
//! appends the address it received the request from to a forwarding header.
//! Only the entries the trusted proxies appended are believed: walking the
//! chain from the right, the client is the first address that is not a
//! trusted proxy. The left-most entries are whatever the client wrote.
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

/// The client's address (canonical): `remote`'s, unless `remote` is a trusted
/// proxy; then the right-most address of the `header` chain that is not a
/// trusted proxy. `read` gives every field of a header name joined with
/// ", " (`None`: no such field); it is called only for a trusted remote.
/// Only the last [`MAX_FORWARDED_BYTES`] and [`MAX_FORWARDED_HOPS`] are
/// read; an unparsable entry (such as the cut-off first one of an
/// over-long chain) ends the walk at the last good address.
pub fn client_ip(
    trusted: &[IpNet],
    header: ForwardedHeader,
    remote: IpAddr,
    read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
) -> IpAddr {
    let remote = canonical(remote);
    if trusted.is_empty() || !trusts(trusted, remote) {
        return remote;
    }
    let Some(chain) = read(header.name()) else {
        return remote;
    };
    let chain = &chain[chain.len().saturating_sub(MAX_FORWARDED_BYTES)..];
    let rfc7239 = header == ForwardedHeader::Forwarded;
    let mut client = remote;
    for hop in chain.rsplit(|&b| b == b',').take(MAX_FORWARDED_HOPS) {
        let addr = if rfc7239 {
            forwarded_for(hop)
        } else {
            parse_ip(hop.trim_ascii())
        };
        let Some(addr) = addr.map(canonical) else {
            break;
        };
        client = addr;
        if !trusts(trusted, addr) {
            break;
        }
    }
    client
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
