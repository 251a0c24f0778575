//! Whose state an [`IpState`](super::IpState) is, kept in the state itself:
//! the table keys states by a keyed hash, which cannot be turned back into
//! an address, and the `keys` command names each IP it lists. 17 bytes,
//! byte-aligned, so the state stays 40 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Client;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// Not named yet (a state is named under the lock that inserts it, so
    /// no scan sees one).
    #[default]
    None,
    Unknown,
    V4,
    V6,
}

/// A client, packed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holder {
    /// IPv4 in the first 4 bytes.
    addr: [u8; 16],
    kind: Kind,
}

impl Holder {
    /// Off the common path: once per key inserted.
    #[cold]
    pub(crate) fn of(client: Client) -> Holder {
        let mut addr = [0; 16];
        let kind = match client {
            Client::Unknown => Kind::Unknown,
            Client::Addr(IpAddr::V4(a)) => {
                addr[..4].copy_from_slice(&a.octets());
                Kind::V4
            }
            Client::Addr(IpAddr::V6(a)) => {
                addr = a.octets();
                Kind::V6
            }
        };
        Holder { addr, kind }
    }

    pub(crate) fn is_unnamed(&self) -> bool {
        self.kind == Kind::None
    }

    pub(crate) fn client(&self) -> Option<Client> {
        let [a, b, c, d, ..] = self.addr;
        match self.kind {
            Kind::None => None,
            Kind::Unknown => Some(Client::Unknown),
            Kind::V4 => Some(Client::Addr(Ipv4Addr::new(a, b, c, d).into())),
            Kind::V6 => Some(Client::Addr(Ipv6Addr::from(self.addr).into())),
        }
    }
}
