//! memcached: state that proxies share by read, modify and compare-and-swap
//! (ip_throttle's per-IP records; Perlbal's `memcached_servers`).
//!
//! An op is a key and a [`Modify`]: a pure function from the key's current
//! value to a reply and what to write back. A batch is served in rounds:
//! 1. one pipelined `gets` per server for every key of the round;
//! 2. each op's `apply` on what it read, then one pipelined write per
//!    server: `cas` against the value read, `add` if there was none,
//!    `delete`, or nothing;
//! 3. an op whose write lost a race (`EXISTS`, `NOT_FOUND`, `NOT_STORED`:
//!    another proxy wrote first) runs again from step 1, at most
//!    [`MAX_ROUNDS`] times, so no update is lost (Perlbal's get then set
//!    raced).
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
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Instant;

use crate::client::{Backend, BatchError};

/// Rounds of read and compare-and-swap for one op before it gives up.
pub const MAX_ROUNDS: usize = 4;
/// Longest value read back; a longer one breaks the connection (no value
/// of ours is near it, so it is not ours).
pub const MAX_VALUE: usize = 4096;
/// Longest reply line.
const MAX_LINE: usize = 512;
/// memcached's key limit.
pub const MAX_KEY: usize = 250;

/// What to write back after reading a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    Keep,
    Set { value: Vec<u8>, ttl_secs: u32 },
    Delete,
}

/// A read-modify-write: pure, as it may run again after a lost race.
pub trait Modify: Send + 'static {
    type Out: Send + 'static;
    fn apply(&self, current: Option<&[u8]>) -> (Self::Out, Put);
}

/// One op: a key and what to do with its value.
pub struct Rmw<M> {
    pub key: String,
    pub modify: M,
}

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

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

pub struct Memcached<M> {
    servers: Vec<String>,
    conns: Vec<Conn>,
    _m: std::marker::PhantomData<fn(M)>,
}

impl<M> Memcached<M> {
    pub fn new(servers: Vec<String>) -> Self {
        Memcached {
            servers,
            conns: Vec::new(),
            _m: std::marker::PhantomData,
        }
    }
}

/// Time left until `deadline`, or a timeout.
fn left(deadline: Instant) -> Result<std::time::Duration, BatchError> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(BatchError::Timeout)
}

fn io_err(e: std::io::Error) -> BatchError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => BatchError::Timeout,
        _ => BatchError::Failed(e.to_string()),
    }
}

impl Conn {
    fn open(server: &str, deadline: Instant) -> Result<Conn, BatchError> {
        let addrs: Vec<SocketAddr> = server
            .to_socket_addrs()
            .map_err(|e| BatchError::Failed(format!("{server}: {e}")))?
            .collect();
        let mut last = BatchError::Failed(format!("{server}: no address"));
        for a in addrs {
            match TcpStream::connect_timeout(&a, left(deadline)?) {
                Ok(s) => {
                    s.set_nodelay(true).map_err(io_err)?;
                    let writer = s.try_clone().map_err(io_err)?;
                    return Ok(Conn {
                        reader: BufReader::with_capacity(16 * 1024, s),
                        writer,
                    });
                }
                Err(e) => last = io_err(e),
            }
        }
        Err(last)
    }

    fn send(&mut self, buf: &[u8], deadline: Instant) -> Result<(), BatchError> {
        self.writer
            .set_write_timeout(Some(left(deadline)?))
            .map_err(io_err)?;
        self.writer.write_all(buf).map_err(io_err)
    }

    /// One reply line without its CRLF.
    fn line(&mut self, deadline: Instant) -> Result<String, BatchError> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(left(deadline)?))
            .map_err(io_err)?;
        let mut buf = Vec::with_capacity(64);
        let n = (&mut self.reader)
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

    fn exact(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, BatchError> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(left(deadline)?))
            .map_err(io_err)?;
        let mut v = vec![0; n + 2];
        self.reader.read_exact(&mut v).map_err(io_err)?;
        if !v.ends_with(b"\r\n") {
            return Err(BatchError::Failed(
                "memcached value not ended by CRLF".into(),
            ));
        }
        v.truncate(n);
        Ok(v)
    }
}

/// Appends a storage command (`HEAD` is its line without the data).
fn write_store(cmds: &mut Vec<u8>, head: &str, value: &[u8]) {
    cmds.extend_from_slice(head.as_bytes());
    cmds.extend_from_slice(b"\r\n");
    cmds.extend_from_slice(value);
    cmds.extend_from_slice(b"\r\n");
}

/// What a `gets` found for a key: the value and its CAS unique.
type Found = Option<(Vec<u8>, u64)>;

impl<M: Modify> Memcached<M> {
    /// `gets` of `keys` (all on server `s`), pipelined as one command.
    fn gets(
        &mut self,
        s: usize,
        keys: &[&str],
        deadline: Instant,
    ) -> Result<Vec<Found>, BatchError> {
        let mut cmd = String::from("gets");
        for k in keys {
            cmd.push(' ');
            cmd.push_str(k);
        }
        cmd.push_str("\r\n");
        let c = &mut self.conns[s];
        c.send(cmd.as_bytes(), deadline)?;
        let mut found: Vec<Found> = vec![None; keys.len()];
        loop {
            let line = c.line(deadline)?;
            if line == "END" {
                return Ok(found);
            }
            // VALUE <key> <flags> <bytes> <cas>
            let f: Vec<&str> = line.split(' ').collect();
            let (key, bytes, cas) = match f.as_slice() {
                ["VALUE", key, _flags, bytes, cas] => (
                    key.to_string(),
                    bytes.parse::<usize>().ok(),
                    cas.parse::<u64>().ok(),
                ),
                _ => {
                    return Err(BatchError::Failed(format!(
                        "memcached: unexpected '{line}'"
                    )))
                }
            };
            let (Some(bytes), Some(cas)) = (bytes, cas) else {
                return Err(BatchError::Failed(format!(
                    "memcached: bad VALUE line '{line}'"
                )));
            };
            if bytes > MAX_VALUE {
                return Err(BatchError::Failed(format!(
                    "memcached: a {bytes}-byte value for '{key}' (at most {MAX_VALUE})"
                )));
            }
            let v = c.exact(bytes, deadline)?;
            for (i, k) in keys.iter().enumerate() {
                if *k == key {
                    found[i] = Some((v.clone(), cas));
                }
            }
        }
    }
}

/// What an op sent after its read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    Nothing,
    Store,
    Delete,
}

impl<M: Modify> Backend for Memcached<M> {
    type Op = Rmw<M>;
    type Reply = M::Out;

    fn is_connected(&self) -> bool {
        !self.servers.is_empty() && self.conns.len() == self.servers.len()
    }

    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.conns.clear();
        for s in &self.servers {
            self.conns.push(Conn::open(s, deadline)?);
        }
        Ok(())
    }

    fn disconnect(&mut self) {
        self.conns.clear();
    }

    fn run(
        &mut self,
        ops: &[&Rmw<M>],
        deadline: Instant,
        out: &mut Vec<Result<M::Out, String>>,
    ) -> Result<(), BatchError> {
        let n = self.servers.len();
        let mut answers: Vec<Option<Result<M::Out, String>>> = Vec::with_capacity(ops.len());
        let mut todo: Vec<usize> = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            if valid_key(&op.key) {
                answers.push(None);
                todo.push(i);
            } else {
                answers.push(Some(Err(format!("invalid memcached key '{}'", op.key))));
            }
        }
        for _round in 0..MAX_ROUNDS {
            if todo.is_empty() {
                break;
            }
            let mut raced = Vec::new();
            for s in 0..n {
                let mine: Vec<usize> = todo
                    .iter()
                    .copied()
                    .filter(|&i| server_of(&ops[i].key, n) == s)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                // Ops on one key run one after the other on the value the
                // previous one left, and the key is written once.
                let mut keys: Vec<&str> = Vec::new();
                let mut of_key: Vec<Vec<usize>> = Vec::new();
                for &i in &mine {
                    let k = ops[i].key.as_str();
                    match keys.iter().position(|&x| x == k) {
                        Some(j) => of_key[j].push(i),
                        None => {
                            keys.push(k);
                            of_key.push(vec![i]);
                        }
                    }
                }
                let found = self.gets(s, &keys, deadline)?;
                let mut cmds = Vec::with_capacity(keys.len() * 64);
                let mut sent = Vec::with_capacity(keys.len());
                let mut replies: Vec<Vec<(usize, M::Out)>> = Vec::with_capacity(keys.len());
                for ((k, group), f) in keys.iter().zip(&of_key).zip(&found) {
                    let mut value: Option<Vec<u8>> = f.as_ref().map(|(v, _)| v.clone());
                    let mut ttl = 0;
                    let mut changed = false;
                    let mut mine = Vec::with_capacity(group.len());
                    for &i in group {
                        let (reply, put) = ops[i].modify.apply(value.as_deref());
                        match put {
                            Put::Keep => {}
                            Put::Set { value: v, ttl_secs } => {
                                value = Some(v);
                                ttl = ttl_secs;
                                changed = true;
                            }
                            Put::Delete => {
                                value = None;
                                changed = true;
                            }
                        }
                        mine.push((i, reply));
                    }
                    replies.push(mine);
                    sent.push(match (changed, value, f) {
                        (false, _, _) | (true, None, None) => Sent::Nothing,
                        (true, Some(v), Some((_, cas))) => {
                            write_store(
                                &mut cmds,
                                &format!("cas {k} 0 {ttl} {} {cas}", v.len()),
                                &v,
                            );
                            Sent::Store
                        }
                        (true, Some(v), None) => {
                            write_store(&mut cmds, &format!("add {k} 0 {ttl} {}", v.len()), &v);
                            Sent::Store
                        }
                        (true, None, Some(_)) => {
                            cmds.extend_from_slice(format!("delete {k}\r\n").as_bytes());
                            Sent::Delete
                        }
                    });
                }
                if !cmds.is_empty() {
                    self.conns[s].send(&cmds, deadline)?;
                }
                for (sent, mine) in sent.into_iter().zip(replies) {
                    let raced_here = match sent {
                        Sent::Nothing => false,
                        _ => match (self.conns[s].line(deadline)?.as_str(), sent) {
                            ("STORED", _) | ("DELETED", _) => false,
                            // Deleting what is already gone is as good as done.
                            ("NOT_FOUND", Sent::Delete) => false,
                            // Another proxy changed, added or removed it first.
                            ("EXISTS", _) | ("NOT_STORED", _) | ("NOT_FOUND", _) => true,
                            (other, _) => {
                                return Err(BatchError::Failed(format!(
                                    "memcached: unexpected '{other}'"
                                )))
                            }
                        },
                    };
                    for (i, reply) in mine {
                        if raced_here {
                            raced.push(i);
                        } else {
                            answers[i] = Some(Ok(reply));
                        }
                    }
                }
            }
            todo = raced;
        }
        for i in todo {
            answers[i] = Some(Err(format!(
                "'{}': lost {MAX_ROUNDS} compare-and-swap races in a row",
                ops[i].key
            )));
        }
        out.extend(
            answers
                .into_iter()
                .map(|a| a.unwrap_or_else(|| Err("no answer".into()))),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
