//! The client behind trusted proxies (crates/forwarded, `client_ip`): the
//! `X-Forwarded-For` and RFC 7239 `Forwarded` chains, client-controlled
//! bytes. Input: the first byte picks the header, the trusted networks,
//! the remote address, whether the header is present and whether the rest
//! is repeated past `MAX_FORWARDED_BYTES`; the rest is the header's value.
//! Invariants: no panic; an untrusted remote is the client (its header
//! unread); an address found is canonical; a trusted hop appended by one
//! more proxy changes nothing; a chain cut at a comma past the byte bound
//! gives what its last bytes alone give.

#![no_main]
#![forbid(unsafe_code)]

use std::net::IpAddr;

use forwarded::{canonical, client_ip, trusts, Client, ForwardedHeader, MAX_FORWARDED_BYTES};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|n| n.parse().unwrap()).collect()
}

fn run(trusted: &[IpNet], h: ForwardedHeader, remote: IpAddr, chain: Option<&[u8]>) -> Client {
    client_ip(trusted, h, remote, |name| {
        assert_eq!(name, h.name());
        chain.map(<[u8]>::to_vec)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let h = if pick & 1 == 0 {
        ForwardedHeader::XForwardedFor
    } else {
        ForwardedHeader::Forwarded
    };
    let trusted = match (pick >> 1) & 3 {
        0 => nets(&["10.0.0.0/8"]),
        1 => nets(&["10.0.0.0/8", "2001:db8::/32", "192.0.2.0/24"]),
        2 => nets(&["0.0.0.0/0", "::/0"]),
        _ => vec![],
    };
    let remote: IpAddr = ["10.1.2.3", "::ffff:10.9.9.9", "2001:db8::7", "198.51.100.1"]
        [usize::from((pick >> 3) & 3)]
    .parse()
    .unwrap();
    let present = pick & 0x20 == 0;
    let mut header = rest.to_vec();
    if pick & 0x40 != 0 && !rest.is_empty() {
        while header.len() <= MAX_FORWARDED_BYTES + 64 {
            header.extend_from_slice(rest);
        }
    }
    let chain = present.then_some(&header[..]);
    let got = run(&trusted, h, remote, chain);

    if trusted.is_empty() || !trusts(&trusted, remote) {
        let unread = client_ip(&trusted, h, remote, |_| panic!("header read"));
        assert_eq!(unread, Client::Addr(canonical(remote)));
        assert_eq!(got, unread);
        return;
    }
    if let Client::Addr(ip) = got {
        assert_eq!(ip, canonical(ip));
    }
    let Some(chain) = chain else {
        assert_eq!(got, Client::Unknown);
        return;
    };
    // One more trusted proxy appends its peer's address.
    let hop: &[u8] = match h {
        ForwardedHeader::XForwardedFor => b", 10.200.0.1",
        ForwardedHeader::Forwarded => b", for=10.200.0.1;proto=https",
    };
    let hops = chain.iter().filter(|&&b| b == b',').count() + 1;
    if hops < forwarded::MAX_FORWARDED_HOPS && chain.len() + hop.len() <= MAX_FORWARDED_BYTES {
        let longer = [chain, hop].concat();
        assert_eq!(run(&trusted, h, remote, Some(&longer)), got);
    }
    // Cut at a comma: the bytes before it are never looked at.
    if chain.len() > MAX_FORWARDED_BYTES {
        let start = chain.len() - MAX_FORWARDED_BYTES;
        if chain[start - 1] == b',' {
            assert_eq!(run(&trusted, h, remote, Some(&chain[start..])), got);
        }
    }
});
