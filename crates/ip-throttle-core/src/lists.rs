//! Allow and deny lists: addresses and CIDRs (IPv4 and IPv6) from files,
//! one per line with `#` comments, matched by prefix.
//!
//! Each list is a pair of prefix tries (`prefix-trie`), v4 and v6, keyed by
//! the address bits as integers (`(u32, u8)`, `(u128, u8)`): a lookup walks
//! at most 32 or 128 levels and allocates nothing. An address on the allow
//! list is always allowed, whatever the deny list says (Perlbal checks the
//! allow list first): allowing `10.0.0.0/8` and denying `10.1.2.3` lets
//! 10.1.2.3 through.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use ipnet::IpNet;
use limits::quote::{quote, shorten_to};
use netaddr::{mask128, mask32};
use prefix_trie::PrefixSet;

use optspec::files::Files;

/// Largest list file read (a 1 M-line list of IPv6 CIDRs is about 40 MB).
pub const MAX_LIST_BYTES: u64 = 512 << 20;

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

pub use netaddr::canonical;

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

    /// Parses a list file's text; `name` is used in errors (`name:line`).
    pub fn parse(text: &str, name: &str) -> Result<CidrList, String> {
        let mut list = CidrList::new();
        for (n, line) in text.lines().enumerate() {
            let entry = line.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let net = entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    format!(
                        "{}:{}: {} is not an IP address or CIDR (one per line, e.g. 192.0.2.0/24, \
                         2001:db8::/32 or 198.51.100.7; # starts a comment)",
                        shorten_to(name, 256),
                        n + 1,
                        quote(entry)
                    )
                })?;
            list.insert(net);
        }
        Ok(list)
    }

    /// Reads and parses a list file.
    pub fn load(path: &Path, files: &dyn Files) -> Result<CidrList, String> {
        let shown = path.display().to_string();
        let file = files.read(path, MAX_LIST_BYTES).map_err(|e| {
            format!(
                "cannot read {}: {}",
                shorten_to(&shown, 256),
                crate::unreadable(e)
            )
        })?;
        CidrList::parse(&file.text, &shown)
    }
}

/// What the lists say about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    Allow,
    Deny,
    Neither,
}

/// The allow and deny lists of a rule (shared: reloading one keeps the other).
#[derive(Clone, Debug, Default)]
pub struct Lists {
    pub allow: Arc<CidrList>,
    pub deny: Arc<CidrList>,
}

impl Lists {
    /// Any allow match wins over any deny match (the issue: "always
    /// allowed"); an allowed address skips the deny lookup.
    pub fn classify(&self, ip: IpAddr) -> Listed {
        if self.allow.contains(ip) {
            Listed::Allow
        } else if self.deny.contains(ip) {
            Listed::Deny
        } else {
            Listed::Neither
        }
    }
}
