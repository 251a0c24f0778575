//! IP addresses in the one form every check uses, for the pure crates and
//! the peer transport alike.
//!
//! A dual-stack socket reports an IPv4 client as `::ffff:a.b.c.d`; keys,
//! allow lists and peer networks all take it as the IPv4 address it is, so
//! one client has one address whatever socket it came in on. Keys and
//! prefix lists aggregate an address by its prefix masks; [`CidrList`]
//! matches one against many prefixes. No I/O.

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};

use ipnet::{IpNet, Ipv4Net};

mod cidr;

pub use cidr::CidrList;

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a dual-stack socket
/// reports) count as the IPv4 address, so one client has one address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// `n` with an IPv4-mapped IPv6 network (`::ffff:a.b.c.d/96+`) written as
/// the IPv4 network it is, truncated: sources are checked as
/// [`IpAddr::to_canonical`], which never yields a mapped address.
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

/// The IPv4 netmask of a `prefix`-bit network (0: none; above 32: 32).
pub fn mask32(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

/// The IPv6 netmask of a `prefix`-bit network (0: none; above 128: 128).
pub fn mask128(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_cover_every_prefix() {
        assert_eq!(mask32(0), 0);
        assert_eq!(mask32(1), 0x8000_0000);
        assert_eq!(mask32(24), 0xffff_ff00);
        assert_eq!(mask32(32), u32::MAX);
        assert_eq!(mask32(200), u32::MAX);
        assert_eq!(mask128(0), 0);
        assert_eq!(mask128(64), u128::MAX << 64);
        assert_eq!(mask128(128), u128::MAX);
        assert_eq!(mask128(255), u128::MAX);
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(canonical(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(canonical(ip("10.0.0.1")), ip("10.0.0.1"));
    }
}
