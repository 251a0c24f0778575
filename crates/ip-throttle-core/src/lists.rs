//! Allow and deny lists: addresses and CIDRs (IPv4 and IPv6) from files,
//! one per line with `#` comments, matched by prefix.
//!
//! A list is a [`CidrList`] (`netaddr`: prefix tries, v4 and v6). An address on the allow
//! list is always allowed, whatever the deny list says (Perlbal checks the
//! allow list first): allowing `10.0.0.0/8` and denying `10.1.2.3` lets
//! 10.1.2.3 through.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use ipnet::IpNet;
use limits::quote::{quote, shorten_to};

use optspec::files::Files;

/// Largest list file read (a 1 M-line list of IPv6 CIDRs is about 40 MB).
pub const MAX_LIST_BYTES: u64 = 512 << 20;

pub use netaddr::{canonical, CidrList};

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
            crate::files::unreadable(e)
        )
    })?;
    parse(&file.text, &shown)
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
