//! A list of IPv4 and IPv6 prefixes, matched by longest prefix.
//!
//! A pair of prefix tries (`prefix-trie`), v4 and v6, keyed by the address
//! bits as integers (`(u32, u8)`, `(u128, u8)`): a lookup walks at most 32
//! or 128 levels and allocates nothing. Shared by ip_throttle's allow and
//! deny lists and rate_limit's global-mode `lists:`.

use std::net::IpAddr;

use ipnet::IpNet;
use prefix_trie::PrefixSet;

use crate::{mask128, mask32};

/// One list of prefixes.
#[derive(Clone, Default)]
pub struct CidrList {
    v4: PrefixSet<(u32, u8)>,
    v6: PrefixSet<(u128, u8)>,
    len: usize,
}

impl std::fmt::Debug for CidrList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CidrList({} prefixes)", self.len)
    }
}

impl CidrList {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of distinct prefixes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a prefix (host bits are cleared: `10.1.2.3/8` is `10.0.0.0/8`).
    /// An IPv4-mapped IPv6 prefix of length 96 or more is the IPv4 prefix.
    pub fn insert(&mut self, net: IpNet) {
        let added = match net {
            IpNet::V4(n) => {
                let l = n.prefix_len();
                self.v4.insert((u32::from(n.addr()) & mask32(l), l))
            }
            IpNet::V6(n) => match n.addr().to_ipv4_mapped() {
                Some(v4) if n.prefix_len() >= 96 => {
                    let l = n.prefix_len() - 96;
                    self.v4.insert((u32::from(v4) & mask32(l), l))
                }
                _ => {
                    let l = n.prefix_len();
                    self.v6.insert((u128::from(n.addr()) & mask128(l), l))
                }
            },
        };
        if added {
            self.len += 1;
        }
    }

    /// The length of the longest prefix that contains `ip` (canonical).
    pub fn longest(&self, ip: IpAddr) -> Option<u8> {
        if self.len == 0 {
            return None;
        }
        match ip {
            IpAddr::V4(a) => self.v4.get_lpm(&(u32::from(a), 32)).map(|p| p.1),
            IpAddr::V6(a) => self.v6.get_lpm(&(u128::from(a), 128)).map(|p| p.1),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.longest(ip).is_some()
    }
}
