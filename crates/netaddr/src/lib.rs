//! IP addresses in the one form every check uses, for the pure crates and
//! the peer transport alike.
//!
//! A dual-stack socket reports an IPv4 client as `::ffff:a.b.c.d`; keys,
//! allow lists and peer networks all take it as the IPv4 address it is, so
//! one client has one address whatever socket it came in on. No I/O.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

use ipnet::{IpNet, Ipv4Net};

/// `n` with an IPv4-mapped IPv6 network (`::ffff:a.b.c.d/96+`) written as
/// the IPv4 network it is, truncated: sources are checked as
/// [`std::net::IpAddr::to_canonical`], which never yields a mapped address.
pub fn canonical_net(n: IpNet) -> IpNet {
    let IpNet::V6(v6) = n else {
        return n.trunc();
    };
    match (v6.addr().to_ipv4_mapped(), v6.prefix_len().checked_sub(96)) {
        (Some(v4), Some(len)) => Ipv4Net::new(v4, len).map_or(n, IpNet::V4).trunc(),
        _ => n.trunc(),
    }
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4 (so it matches
/// canonical sources, and an IPv4 socket can send to it).
pub fn canonical_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}
