//! memcached as a [`CasStore`] (ip_throttle's shared per-IP records;
//! Perlbal's `memcached_servers`): `gets` reads a key with its CAS unique,
//! `cas` writes it back only if that still holds, `add` if it was absent,
//! `delete` removes it (an absent key is deleted already).
//!
//! Keys go to servers by a fixed hash (FNV-1a), so every proxy that lists
//! the same servers in the same order agrees on where a key lives. A batch
//! needs every listed server: if one is down, the batch fails and the
//! client reconnects with backoff (callers fall back to local state).
//!
//! The text protocol subset is written here rather than taken from the
//! `memcache` crate: that crate checks each pooled connection out with a
//! `version` round trip and sends one command per round trip, where this
//! needs a bounded, pipelined exchange on one thread with a deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Instant;

use crate::client::BatchError;
use crate::net::{io_err, Endpoint, Timed};
use crate::rmw::{CasStore, CasWrite};

/// Longest value read back; a longer one breaks the connection (no value
/// of ours is near it, so it is not ours).
pub const MAX_VALUE: usize = 4096;
/// Longest reply line.
const MAX_LINE: usize = 512;
/// memcached's key limit.
pub const MAX_KEY: usize = 250;

/// A valid memcached key: 1–250 bytes, no spaces or control characters.
pub fn valid_key(k: &str) -> bool {
    !k.is_empty() && k.len() <= MAX_KEY && k.bytes().all(|b| b.is_ascii_graphic())
}

/// Which server holds `key` (FNV-1a 64, the same on every proxy).
pub fn server_of(key: &str, servers: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % servers.max(1) as u64) as usize
}

/// One server's connection; one deadline bounds each exchange on it
/// ([`Timed`]), so a server that drips its answer cannot stretch a request.
struct Conn {
    io: BufReader<Timed>,
}

pub struct Memcached {
    servers: Vec<String>,
    /// Resolved off the I/O thread ([`Endpoint`]).
    endpoints: Vec<Endpoint>,
    conns: Vec<Conn>,
}

impl Memcached {
    /// `servers`: `HOST:PORT` each (as [`crate::url::memcached`] gives them).
    pub fn new(servers: Vec<String>) -> Self {
        Memcached {
            endpoints: servers.iter().map(|s| Endpoint::parse(s)).collect(),
            servers,
            conns: Vec::new(),
        }
    }
}

impl Conn {
    fn open(server: &Endpoint, deadline: Instant) -> Result<Conn, BatchError> {
        let s = server.connect(deadline)?;
        Ok(Conn {
            io: BufReader::with_capacity(16 * 1024, Timed::new(s)),
        })
    }

    fn send(&mut self, buf: &[u8], deadline: Instant) -> Result<(), BatchError> {
        let io = self.io.get_mut();
        io.deadline = deadline;
        io.write_all(buf).map_err(io_err)
    }

    /// The replies to the commands just sent, read by the same deadline.
    fn replies(&mut self, deadline: Instant) -> &mut BufReader<Timed> {
        self.io.get_mut().deadline = deadline;
        &mut self.io
    }
}

/// One reply line without its CRLF.
fn line(io: &mut impl BufRead) -> Result<String, BatchError> {
    let mut buf = Vec::with_capacity(64);
    let n = io
        .take(MAX_LINE as u64 + 2)
        .read_until(b'\n', &mut buf)
        .map_err(io_err)?;
    if n == 0 {
        return Err(BatchError::Failed("memcached closed the connection".into()));
    }
    if !buf.ends_with(b"\r\n") {
        return Err(BatchError::Failed("memcached sent an overlong line".into()));
    }
    buf.truncate(buf.len() - 2);
    String::from_utf8(buf).map_err(|_| BatchError::Failed("memcached sent non-UTF-8".into()))
}

/// A value's `n` bytes and their CRLF.
fn exact(io: &mut impl Read, n: usize) -> Result<Vec<u8>, BatchError> {
    let mut v = vec![0; n + 2];
    io.read_exact(&mut v).map_err(io_err)?;
    if !v.ends_with(b"\r\n") {
        return Err(BatchError::Failed(
            "memcached value not ended by CRLF".into(),
        ));
    }
    v.truncate(n);
    Ok(v)
}

/// Each key's value and CAS unique, if found.
pub type Found = Vec<Option<(Vec<u8>, u64)>>;

/// The reply to `gets KEYS`.
fn gets_reply(io: &mut impl BufRead, keys: &[&str]) -> Result<Found, BatchError> {
    let mut found = vec![None; keys.len()];
    loop {
        let line = line(io)?;
        if line == "END" {
            return Ok(found);
        }
        // VALUE <key> <flags> <bytes> <cas>
        let f: Vec<&str> = line.split(' ').collect();
        let ["VALUE", key, _flags, bytes, cas] = f.as_slice() else {
            return Err(BatchError::Failed(format!(
                "memcached: unexpected '{line}'"
            )));
        };
        let (Ok(bytes), Ok(cas)) = (bytes.parse::<usize>(), cas.parse::<u64>()) else {
            return Err(BatchError::Failed(format!(
                "memcached: bad VALUE line '{line}'"
            )));
        };
        if bytes > MAX_VALUE {
            return Err(BatchError::Failed(format!(
                "memcached: a {bytes}-byte value for '{key}' (at most {MAX_VALUE})"
            )));
        }
        let key = key.to_string();
        let v = exact(io, bytes)?;
        if let Some(i) = keys.iter().position(|k| *k == key) {
            found[i] = Some((v, cas));
        }
    }
}

/// The replies to pipelined `cas`, `add` or `delete` commands (`deletes`:
/// which of them is a `delete`): whether each lost a race.
fn write_replies(
    io: &mut impl BufRead,
    deletes: impl Iterator<Item = bool>,
) -> Result<Vec<bool>, BatchError> {
    let mut lost = Vec::with_capacity(deletes.size_hint().0);
    for delete in deletes {
        let raced = match line(io)?.as_str() {
            "STORED" | "DELETED" => false,
            // Deleting what is already gone is as good as done.
            "NOT_FOUND" if delete => false,
            // Another proxy changed, added or removed it first.
            "EXISTS" | "NOT_STORED" | "NOT_FOUND" => true,
            other => {
                return Err(BatchError::Failed(format!(
                    "memcached: unexpected '{other}'"
                )))
            }
        };
        lost.push(raced);
    }
    Ok(lost)
}

/// [`gets_reply`] and [`write_replies`] over bytes, and the bytes each
/// took: the memcached replies' fuzz target (`fuzz/fuzz_targets/store_memcached.rs`).
#[doc(hidden)]
pub mod replies {
    use super::{BatchError, Found};

    /// The reply to `gets KEYS`, read from `bytes`.
    pub fn gets(mut bytes: &[u8], keys: &[&str]) -> Result<(Found, usize), BatchError> {
        let len = bytes.len();
        let found = super::gets_reply(&mut bytes, keys)?;
        Ok((found, len - bytes.len()))
    }

    /// The replies to pipelined writes (`deletes`: which are `delete`s).
    pub fn writes(mut bytes: &[u8], deletes: &[bool]) -> Result<(Vec<bool>, usize), BatchError> {
        let len = bytes.len();
        let lost = super::write_replies(&mut bytes, deletes.iter().copied())?;
        Ok((lost, len - bytes.len()))
    }
}

/// memcached's expiry for a TTL: relative up to 30 days, above that an
/// absolute Unix time (which is how memcached reads larger values).
fn exptime(ttl_secs: u32) -> u64 {
    const RELATIVE_MAX: u32 = 30 * 24 * 3600;
    if ttl_secs <= RELATIVE_MAX {
        return u64::from(ttl_secs);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now + u64::from(ttl_secs)
}

/// Appends a storage command (`HEAD` is its line without the data).
fn write_store(cmds: &mut Vec<u8>, head: &str, value: &[u8]) {
    cmds.extend_from_slice(head.as_bytes());
    cmds.extend_from_slice(b"\r\n");
    cmds.extend_from_slice(value);
    cmds.extend_from_slice(b"\r\n");
}

impl CasStore for Memcached {
    /// The CAS unique `gets` returned.
    type Version = u64;

    fn valid_key(&self, key: &str) -> bool {
        valid_key(key)
    }

    fn server_of(&self, key: &str) -> usize {
        server_of(key, self.servers.len())
    }

    fn servers(&self) -> usize {
        self.servers.len()
    }

    fn is_connected(&self) -> bool {
        !self.servers.is_empty() && self.conns.len() == self.servers.len()
    }

    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.conns.clear();
        for (s, e) in self.servers.iter().zip(&self.endpoints) {
            let c = Conn::open(e, deadline).map_err(|e| match e {
                BatchError::Failed(e) => BatchError::Failed(format!("{s}: {e}")),
                t => t,
            })?;
            self.conns.push(c);
        }
        Ok(())
    }

    fn disconnect(&mut self) {
        self.conns.clear();
    }

    /// One `gets` of every key.
    fn read(
        &mut self,
        server: usize,
        keys: &[&str],
        deadline: Instant,
    ) -> Result<Vec<Option<(Vec<u8>, u64)>>, BatchError> {
        let mut cmd = String::from("gets");
        for k in keys {
            cmd.push(' ');
            cmd.push_str(k);
        }
        cmd.push_str("\r\n");
        let c = &mut self.conns[server];
        c.send(cmd.as_bytes(), deadline)?;
        gets_reply(c.replies(deadline), keys)
    }

    /// `cas`, `add` or `delete` per key, pipelined.
    fn write(
        &mut self,
        server: usize,
        writes: &[CasWrite<'_, u64>],
        deadline: Instant,
    ) -> Result<Vec<bool>, BatchError> {
        let mut cmds = Vec::with_capacity(writes.len() * 64);
        for w in writes {
            let k = w.key;
            let w_value = w.value.map(|(v, ttl)| (v, exptime(ttl)));
            match (w_value, w.read) {
                (Some((v, ttl)), Some(cas)) => {
                    write_store(&mut cmds, &format!("cas {k} 0 {ttl} {} {cas}", v.len()), v)
                }
                (Some((v, ttl)), None) => {
                    write_store(&mut cmds, &format!("add {k} 0 {ttl} {}", v.len()), v)
                }
                (None, _) => cmds.extend_from_slice(format!("delete {k}\r\n").as_bytes()),
            }
        }
        let c = &mut self.conns[server];
        c.send(&cmds, deadline)?;
        write_replies(
            c.replies(deadline),
            writes.iter().map(|w| w.value.is_none()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_expiries_are_absolute_times() {
        assert_eq!(exptime(60), 60);
        assert_eq!(exptime(30 * 24 * 3600), 30 * 24 * 3600);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let abs = exptime(40 * 24 * 3600);
        assert!((now + 40 * 24 * 3600..now + 40 * 24 * 3600 + 5).contains(&abs));
    }

    /// The replies' parsers over bytes (the fuzz target's entries).
    #[test]
    fn replies_read_from_bytes() {
        let sent = b"VALUE k 0 2 9\r\nab\r\nVALUE x 0 1 3\r\nz\r\nEND\r\nSTORED\r\n";
        let (found, took) = replies::gets(sent, &["j", "k"]).unwrap();
        assert_eq!(found, vec![None, Some((b"ab".to_vec(), 9))]);
        assert_eq!(&sent[took..], b"STORED\r\n");
        let sent = b"STORED\r\nNOT_FOUND\r\nNOT_FOUND\r\nEXISTS\r\n";
        let (lost, took) = replies::writes(sent, &[false, true, false, false]).unwrap();
        assert_eq!((lost, took), (vec![false, false, true, true], sent.len()));
        for bad in [
            &b"VALUE k 0 4097 1\r\n"[..],
            b"VALUE k 0 2 1\r\nabc\r\n",
            b"END\n",
        ] {
            assert!(replies::gets(bad, &["k"]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_follow_memcacheds_rules() {
        assert!(valid_key("ipt:web:2001:db8::1"));
        for bad in ["", "a b", "a\r\nset x", &"k".repeat(MAX_KEY + 1)] {
            assert!(!valid_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_server_of_a_key_is_fixed() {
        // Every proxy must agree: pinned values, not just consistency.
        assert_eq!(server_of("ipt:web:192.0.2.7", 1), 0);
        let picks: Vec<usize> = (0..8).map(|i| server_of(&format!("k{i}"), 3)).collect();
        assert_eq!(
            picks,
            (0..8)
                .map(|i| server_of(&format!("k{i}"), 3))
                .collect::<Vec<_>>()
        );
        assert_eq!(server_of("a", 2), (0xaf63_dc4c_8601_ec8c_u64 % 2) as usize);
    }
}
