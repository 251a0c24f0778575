//! What identifies a client (`--key`): its address (aggregated by prefix,
//! and taken from `X-Forwarded-For`/`Forwarded` only behind a trusted
//! proxy), a header, a cookie or a query parameter, or a combination.
//!
//! Everything here reads client-controlled bytes: nothing is stored but the
//! key bytes handed to the caller (who keeps only their keyed hash), and
//! every parse is linear in the input.

use std::net::IpAddr;

pub use forwarded::Client;
use ipnet::IpNet;
use netaddr::{canonical, mask128, mask32};

/// One part of a client key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The client address (see [`TrustedProxies::client_ip`]).
    Ip,
    Header(String),
    Cookie(String),
    Query(String),
}

impl Source {
    /// As written in `--key`.
    pub fn name(&self) -> String {
        match self {
            Source::Ip => "ip".to_owned(),
            Source::Header(n) => format!("header:{n}"),
            Source::Cookie(n) => format!("cookie:{n}"),
            Source::Query(n) => format!("query:{n}"),
        }
    }
}

/// What to do with a request that lacks a key source (`--key-missing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// All such requests share one key (the default): they are limited together.
    Shared,
    /// Not limited by this rule.
    Pass,
    /// Refused with the rule's error status.
    Refuse,
}

impl Missing {
    pub fn parse(v: &str) -> Option<Missing> {
        match v {
            "shared" => Some(Missing::Shared),
            "pass" => Some(Missing::Pass),
            "refuse" => Some(Missing::Refuse),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Missing::Shared => "shared",
            Missing::Pass => "pass",
            Missing::Refuse => "refuse",
        }
    }
}

/// The header trusted proxies append the client's address to
/// (`--forwarded-header`); the walk is in crates/forwarded, shared with
/// ip_throttle.so.
pub use forwarded::ForwardedHeader;

/// The parts of a request a key can come from.
pub trait RequestView {
    /// The remote address: the one that connected to Traffic Server.
    fn remote_ip(&self) -> Option<IpAddr>;
    /// Every field of that name, in order, joined with ", " (as RFC 9110
    /// allows for list fields); `None` if there is none.
    fn header(&self, name: &str) -> Option<Vec<u8>>;
    /// The raw query string, without the `?`.
    fn query(&self) -> Option<Vec<u8>>;
    /// The client, if the caller already found it through the same
    /// `--trusted-proxies` and `--forwarded-header` (`--exempt` did): `ip`
    /// keys then skip a second walk of the forwarding header.
    fn resolved_client(&self) -> Option<Option<Client>> {
        None
    }
}

/// A rule's key: its sources, how addresses are aggregated, and which
/// proxies are trusted to report the client's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpec {
    pub sources: Vec<Source>,
    /// Prefix lengths that `ip` keys are aggregated to (`--key-prefix`).
    pub v4_prefix: u8,
    pub v6_prefix: u8,
    /// How the client's address is found (`--trusted-proxies`,
    /// `--forwarded-header`).
    pub proxies: TrustedProxies,
}

/// Proxies trusted to report the client's address, and the header they
/// write it to: how `--key=ip` and `--exempt` find a request's client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Proxies whose forwarding header is believed (`--trusted-proxies`).
    pub trusted: Vec<IpNet>,
    /// Which header they write (`--forwarded-header`).
    pub forwarded: ForwardedHeader,
}

impl TrustedProxies {
    /// No proxy trusted: the client is the remote address.
    pub fn none() -> TrustedProxies {
        TrustedProxies {
            trusted: Vec::new(),
            forwarded: ForwardedHeader::XForwardedFor,
        }
    }

    /// The client: the remote address, unless that is a trusted proxy; then
    /// the right-most address of the forwarding chain that is not a trusted
    /// proxy (the left-most entries are whatever the client wrote, so they
    /// are never believed), or [`Client::Unknown`] if the proxy does not
    /// name it. See [`forwarded::client_ip`]. `None`: no remote address.
    pub fn client_ip(&self, req: &impl RequestView) -> Option<Client> {
        let remote = req.remote_ip()?;
        Some(forwarded::client_ip(
            &self.trusted,
            self.forwarded,
            remote,
            |name| req.header(name),
        ))
    }
}

/// The `ip` part's value for [`Client::Unknown`]: an address's is 4 or 16 bytes.
pub const UNKNOWN_CLIENT: &[u8] = &[];

/// Most bytes of one source that go into a key: longer values are cut (and
/// still distinguish clients by their first 512 bytes).
pub const MAX_SOURCE_BYTES: usize = 512;
pub use forwarded::{MAX_FORWARDED_BYTES, MAX_FORWARDED_HOPS};

impl KeySpec {
    /// Parses `--key`: `ip`, `header:NAME`, `cookie:NAME`, `query:NAME`,
    /// comma-separated, each at most once.
    pub fn parse_sources(value: &str) -> Result<Vec<Source>, String> {
        let mut out = Vec::new();
        for part in value.split(',') {
            let part = part.trim();
            let src = match part.split_once(':') {
                None if part == "ip" => Source::Ip,
                Some(("header", n)) if valid_token(n) => Source::Header(n.to_owned()),
                Some(("cookie", n)) if valid_token(n) => Source::Cookie(n.to_owned()),
                Some(("query", n)) if valid_token(n) => Source::Query(n.to_owned()),
                _ => {
                    return Err(format!(
                        "{} is not a key source (allowed: ip, header:NAME, cookie:NAME, query:NAME, comma-separated)",
                        limits::quote::quote(part)
                    ))
                }
            };
            if out.contains(&src) {
                return Err(format!("{} is given twice", limits::quote::quote(part)));
            }
            out.push(src);
        }
        Ok(out)
    }

    /// Parses `--key-prefix=V4/V6`, e.g. `32/64` or `24/48`.
    pub fn parse_prefix(value: &str) -> Option<(u8, u8)> {
        let (a, b) = value.split_once('/')?;
        let (v4, v6) = (a.trim().parse::<u8>().ok()?, b.trim().parse::<u8>().ok()?);
        (v4 <= 32 && v6 <= 128).then_some((v4, v6))
    }

    /// Parses `--trusted-proxies=CIDR[,CIDR…]` (a bare address is a /32 or /128).
    pub fn parse_trusted(value: &str) -> Result<Vec<IpNet>, String> {
        forwarded::parse_trusted(value)
    }

    /// The sources as `--key` spells them, for the log.
    pub fn describe_sources(&self) -> String {
        let names: Vec<String> = self.sources.iter().map(Source::name).collect();
        names.join(",")
    }

    /// Writes the key of `req` into `out` (cleared first): each source as a
    /// tag byte, a length and its bytes, so no two combinations of values
    /// produce the same bytes. False if a source is missing.
    pub fn key(&self, req: &impl RequestView, out: &mut Vec<u8>) -> bool {
        out.clear();
        for (i, src) in self.sources.iter().enumerate() {
            let tag = u8::try_from(i).unwrap_or(u8::MAX);
            let found = match src {
                Source::Ip => match req
                    .resolved_client()
                    .unwrap_or_else(|| self.proxies.client_ip(req))
                {
                    Some(Client::Addr(ip)) => {
                        let (bytes, len) = self.aggregate(ip);
                        push_part(out, tag, &bytes[..len]);
                        true
                    }
                    // A client all the same (not --key-missing), one key for
                    // all of them: an empty value, which no address has.
                    Some(Client::Unknown) => {
                        push_part(out, tag, UNKNOWN_CLIENT);
                        true
                    }
                    None => false,
                },
                Source::Header(name) => req.header(name).is_some_and(|v| {
                    push_part(out, tag, &v);
                    true
                }),
                Source::Cookie(name) => req
                    .header("Cookie")
                    .and_then(|c| cookie(&c, name).map(|v| push_part(out, tag, v)))
                    .is_some(),
                Source::Query(name) => req
                    .query()
                    .and_then(|q| query_param(&q, name).map(|v| push_part(out, tag, v)))
                    .is_some(),
            };
            if !found {
                return false;
            }
        }
        true
    }

    /// The key that a request whose (only) source has `value` gets, as
    /// [`KeySpec::key`] writes it: for listing key values in a file (an
    /// address for `ip`, aggregated to the rule's prefix; the raw value of
    /// a header, cookie or query parameter). False if the spec has several
    /// sources or `value` is not an address for `ip`.
    pub fn value_key(&self, value: &str, out: &mut Vec<u8>) -> bool {
        out.clear();
        match self.sources.as_slice() {
            [Source::Ip] => match value.parse::<IpAddr>() {
                Ok(ip) => {
                    let (bytes, len) = self.aggregate(canonical(ip));
                    push_part(out, 0, &bytes[..len]);
                    true
                }
                Err(_) => false,
            },
            [_] => {
                push_part(out, 0, value.as_bytes());
                true
            }
            _ => false,
        }
    }

    /// The key an operator names in a command (`key`, `block`, …), as
    /// [`KeySpec::key`] writes it: its one source's value as
    /// [`value_key`](Self::value_key) takes it, or as
    /// [`display`](Self::display) shows it (`ip=192.0.2.7`,
    /// `ip=2001:db8::/64`, `ip=unknown`, `header:X-User='alice'`: a quoted
    /// value without escapes). False for anything else, and for keys of
    /// several sources (`top`'s `#HASH` names those).
    pub fn named_key(&self, text: &str, out: &mut Vec<u8>) -> bool {
        let [src] = self.sources.as_slice() else {
            out.clear();
            return false;
        };
        let name = src.name();
        let value = text
            .strip_prefix(name.as_str())
            .and_then(|v| v.strip_prefix('='))
            .unwrap_or(text);
        match src {
            Source::Ip if value == Client::Unknown.to_string() => {
                out.clear();
                push_part(out, 0, UNKNOWN_CLIENT);
                true
            }
            // `display`'s prefix, if given, must be the rule's: the address
            // is aggregated to that (`10.0.0.0/8` on a /32 rule names no key).
            Source::Ip => match value.split_once('/') {
                None => self.value_key(value, out),
                Some((a, p)) => {
                    let rule = match a.parse::<IpAddr>().map(canonical) {
                        Ok(IpAddr::V4(_)) => self.v4_prefix,
                        Ok(IpAddr::V6(_)) => self.v6_prefix,
                        Err(_) => u8::MAX,
                    };
                    if p.parse::<u8>() == Ok(rule) {
                        self.value_key(a, out)
                    } else {
                        out.clear();
                        false
                    }
                }
            },
            // `display` quotes; one it cut (`'abc…' (700 bytes)`) or escaped
            // (`\n`, a byte not UTF-8) names no key: `top`'s `#HASH` does.
            _ => match value.strip_prefix('\'') {
                Some(quoted) => match quoted.strip_suffix('\'') {
                    Some(v) if !v.contains(['\\', '…', '\u{fffd}']) => self.value_key(v, out),
                    _ => {
                        out.clear();
                        false
                    }
                },
                None => self.value_key(value, out),
            },
        }
    }

    /// A readable form of a key written by [`KeySpec::key`], for operators
    /// (`top`): `ip=192.0.2.7`, `ip=2001:db8::/64`, `ip=unknown`,
    /// `header:X-User="alice"`.
    /// Values are quoted and shortened; nothing here is trusted.
    pub fn display(&self, key: &[u8]) -> String {
        let mut parts = Vec::new();
        let mut rest = key;
        for src in &self.sources {
            let [_, hi, lo, tail @ ..] = rest else { break };
            let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
            let (value, next) = tail.split_at(len);
            rest = next;
            let shown = match (src, value.len()) {
                (Source::Ip, 4) => {
                    let mut b = [0u8; 4];
                    b.copy_from_slice(value);
                    with_prefix(IpAddr::from(b), self.v4_prefix, 32)
                }
                (Source::Ip, 16) => {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(value);
                    with_prefix(IpAddr::from(b), self.v6_prefix, 128)
                }
                (Source::Ip, 0) => Client::Unknown.to_string(),
                _ => limits::quote::quote(&String::from_utf8_lossy(value)),
            };
            parts.push(format!("{}={shown}", src.name()));
        }
        parts.join(",")
    }

    /// The address bytes with everything past the rule's prefix zeroed, in
    /// a buffer of 16 (4 used for IPv4): no allocation per request.
    fn aggregate(&self, ip: IpAddr) -> ([u8; 16], usize) {
        let mut out = [0u8; 16];
        match ip {
            IpAddr::V4(a) => {
                let bits = u32::from(a) & mask32(self.v4_prefix);
                out[..4].copy_from_slice(&bits.to_be_bytes());
                (out, 4)
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a) & mask128(self.v6_prefix);
                (bits.to_be_bytes(), 16)
            }
        }
    }
}

fn with_prefix(ip: IpAddr, prefix: u8, full: u8) -> String {
    if prefix >= full {
        ip.to_string()
    } else {
        format!("{ip}/{prefix}")
    }
}

fn push_part(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    let value = &value[..value.len().min(MAX_SOURCE_BYTES)];
    out.push(tag);
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

fn valid_token(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// The value of cookie `name` in a `Cookie` field (`a=1; b=2`).
fn cookie<'c>(field: &'c [u8], name: &str) -> Option<&'c [u8]> {
    field.split(|&b| b == b';' || b == b',').find_map(|pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        (trim(&pair[..eq]) == name.as_bytes()).then(|| trim(&pair[eq + 1..]))
    })
}

/// The raw value of query parameter `name` (`a=1&b=2`), not percent-decoded.
fn query_param<'q>(query: &'q [u8], name: &str) -> Option<&'q [u8]> {
    query.split(|&b| b == b'&' || b == b';').find_map(|pair| {
        let eq = pair.iter().position(|&b| b == b'=').unwrap_or(pair.len());
        (&pair[..eq] == name.as_bytes()).then(|| pair.get(eq + 1..).unwrap_or_default())
    })
}

#[cfg(test)]
mod tests;
