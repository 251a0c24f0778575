//! Redis Cluster: a batch is split by the hash slot of each command's key, sent
//! as one pipeline per master, and answered in the batch's order.
//!
//! Why not the `redis` crate's `ClusterConnection` (0.32, sync): its
//! pipeline reads every answer with the whole read timeout and keeps
//! reading after one times out (a hung master costs a batch of N commands
//! N timeouts, not one deadline); it fails the whole pipeline on one error
//! reply (`NOSCRIPT`, a script error); its `MOVED` retry never triggers in
//! a pipeline (error replies arrive as values, not errors); and its single
//! commands retry with sleeps that ignore any deadline. Here the batch's
//! deadline bounds the whole exchange, as with one server, on
//! `resp`'s connections: one per master.
//!
//! - **Hash slot map**: `CLUSTER SLOTS` from the first seed that answers, at
//!   connect. A hash slot no master serves, or any I/O error or timeout, fails
//!   the batch: the client disconnects and reconnects with backoff, which
//!   learns the map afresh.
//! - **Redirects**: a `MOVED` answer updates the hash slot's master and an `ASK`
//!   answer is sent again with `ASKING` to the named node, once per batch
//!   and within its deadline (a resharding or failover); still redirected,
//!   it is that command's error.
//! - **Scripts**: `SCRIPT LOAD` on every master at connect, so `EVALSHA`
//!   (the hash is the same everywhere) works on whichever master a key
//!   lives; a `NOSCRIPT` (a master restarted or newly promoted) makes the
//!   backend load them on every master again and retry, as with one server.

use std::time::Instant;

use redis::Value;

use crate::client::BatchError;
use crate::net::{left, Endpoint};
use crate::resp::{load_scripts, RespConn};
use store_url::Addr;

pub const HASH_SLOTS: usize = 16_384;
/// A hash slot no master serves.
const NONE: u16 = u16::MAX;
/// Most masters followed (a hostile `CLUSTER SLOTS` or `MOVED` cannot grow the list further).
const MAX_NODES: usize = 1024;

/// The hash slot of a key: CRC16 (XMODEM) of its hash tag (the first `{...}`,
/// if not empty) or of the whole key, modulo 16384.
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match rest.iter().position(|&b| b == b'}') {
            Some(0) | None => None,
            Some(close) => Some(&rest[..close]),
        }
    });
    crc16(tagged.unwrap_or(key)) % HASH_SLOTS as u16
}

/// One command of a batch, packed, with the hash slot of the key it touches
/// (by which a Cluster routes it).
pub(crate) struct Routed {
    pub hash_slot: u16,
    pub packed: Vec<u8>,
}

impl Routed {
    pub fn new(key: &[u8], cmd: &redis::Cmd) -> Routed {
        Routed {
            hash_slot: hash_slot(key),
            packed: cmd.get_packed_command(),
        }
    }
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

struct Master {
    addr: Addr,
    endpoint: Endpoint,
    conn: Option<RespConn>,
}

pub(crate) struct Cluster {
    seeds: Vec<Addr>,
    masters: Vec<Master>,
    /// Slot -> index in `masters` ([`NONE`]: not served).
    hash_slots: Vec<u16>,
    /// The seeds' and masters' endpoints, kept across reconnects so a
    /// name's addresses outlive a connection (pruned at each connect).
    endpoints: Vec<Endpoint>,
}

impl Cluster {
    pub fn new(seeds: Vec<Addr>) -> Cluster {
        let endpoints = seeds
            .iter()
            .map(|a| Endpoint::new(&a.host, a.port))
            .collect();
        Cluster {
            seeds,
            masters: Vec::new(),
            hash_slots: Vec::new(),
            endpoints,
        }
    }

    fn endpoint(&mut self, host: &str, port: u16) -> Endpoint {
        if let Some(e) = self.endpoints.iter().find(|e| e.is(host, port)) {
            return e.clone();
        }
        let e = Endpoint::new(host, port);
        self.endpoints.push(e.clone());
        e
    }

    fn master(&mut self, addr: Addr, conn: Option<RespConn>) -> Master {
        Master {
            endpoint: self.endpoint(&addr.host, addr.port),
            addr,
            conn,
        }
    }

    pub fn is_connected(&self) -> bool {
        !self.masters.is_empty()
    }

    pub fn disconnect(&mut self) {
        self.masters.clear();
        self.hash_slots.clear();
    }

    /// Learns the hash slot map from the first seed that answers and connects
    /// to every master.
    pub fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.disconnect();
        let mut why = String::new();
        for seed in self.seeds.clone() {
            let endpoint = self.endpoint(&seed.host, seed.port);
            match hash_slot_map(&seed, &endpoint, deadline) {
                Ok((masters, hash_slots, mut conn)) => {
                    for addr in masters {
                        // The seed is a master: keep its connection.
                        let c = if addr == seed { conn.take() } else { None };
                        let m = self.master(addr, c);
                        self.masters.push(m);
                    }
                    self.hash_slots = hash_slots;
                    let (seeds, masters) = (&self.seeds, &self.masters);
                    self.endpoints.retain(|e| {
                        seeds.iter().any(|a| e.is(&a.host, a.port))
                            || masters.iter().any(|m| e.is(&m.addr.host, m.addr.port))
                    });
                    break;
                }
                Err(BatchError::Failed(e)) => why = format!("{}: {e}", seed.host_port()),
                Err(BatchError::Timeout) => {
                    left(deadline)?;
                    why = format!("{}: timed out", seed.host_port());
                }
            }
        }
        if self.masters.is_empty() {
            return Err(BatchError::Failed(format!(
                "no seed node gave the cluster's slot map ({why})"
            )));
        }
        for i in 0..self.masters.len() {
            if let Err(e) = self.conn(i, deadline) {
                self.disconnect();
                return Err(e);
            }
        }
        Ok(())
    }

    /// The connection to master `i`, opened if need be.
    fn conn(&mut self, i: usize, deadline: Instant) -> Result<&mut RespConn, BatchError> {
        let m = &mut self.masters[i];
        if m.conn.is_none() {
            let c = RespConn::open(&m.endpoint, deadline).map_err(|e| match e {
                BatchError::Failed(e) => {
                    BatchError::Failed(format!("master {}: {e}", m.addr.host_port()))
                }
                t => t,
            })?;
            m.conn = Some(c);
        }
        m.conn
            .as_mut()
            .ok_or_else(|| BatchError::Failed("not connected".into()))
    }

    /// Loads `scripts` on every master; their SHA1s (the same on each).
    pub fn load_scripts(
        &mut self,
        scripts: &[&str],
        deadline: Instant,
    ) -> Result<Vec<String>, BatchError> {
        let mut shas = Vec::new();
        for i in 0..self.masters.len() {
            shas = load_scripts(self.conn(i, deadline)?, scripts, deadline)?;
        }
        Ok(shas)
    }

    /// Master of `host:port` (from a redirect), added if new.
    fn master_at(&mut self, hostport: &str) -> Option<usize> {
        let (host, port) = hostport.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Some(i) = self
            .masters
            .iter()
            .position(|m| m.addr.host == host && m.addr.port == port)
        {
            return Some(i);
        }
        if self.masters.len() >= MAX_NODES || host.is_empty() {
            return None;
        }
        let addr = Addr {
            host: host.to_owned(),
            port,
            db: 0,
        };
        let m = self.master(addr, None);
        self.masters.push(m);
        Some(self.masters.len() - 1)
    }

    pub fn query(&mut self, cmds: &[Routed], deadline: Instant) -> Result<Vec<Value>, BatchError> {
        let mut out = vec![Value::Nil; cmds.len()];
        // (command, master, with ASKING) still to send.
        let mut todo = Vec::with_capacity(cmds.len());
        for (i, c) in cmds.iter().enumerate() {
            match self.hash_slots.get(usize::from(c.hash_slot)) {
                Some(&m) if m != NONE => todo.push((i, usize::from(m), false)),
                _ => {
                    return Err(BatchError::Failed(format!(
                        "slot {} has no master in the cluster's slot map",
                        c.hash_slot
                    )))
                }
            }
        }
        for round in 0..2 {
            let redirected = self.round(cmds, &todo, &mut out, deadline)?;
            if redirected.is_empty() || round == 1 {
                break;
            }
            todo.clear();
            for i in redirected {
                let Value::ServerError(e) = &out[i] else {
                    continue;
                };
                let asking = e.code() == "ASK";
                // "SLOT HOST:PORT"
                let mut d = e.details().unwrap_or_default().split(' ');
                let (hash_slot, to) = (d.next().and_then(|s| s.parse::<usize>().ok()), d.next());
                let Some(m) = to.and_then(|to| self.master_at(to)) else {
                    continue;
                };
                if !asking {
                    if let Some(s) = hash_slot.and_then(|s| self.hash_slots.get_mut(s)) {
                        *s = m as u16;
                    }
                }
                todo.push((i, m, asking));
            }
        }
        Ok(out)
    }

    /// Sends `todo` as one pipeline per master, then reads each master's
    /// answers into `out`; the commands redirected (`MOVED`, `ASK`).
    fn round(
        &mut self,
        cmds: &[Routed],
        todo: &[(usize, usize, bool)],
        out: &mut [Value],
        deadline: Instant,
    ) -> Result<Vec<usize>, BatchError> {
        let mut masters: Vec<usize> = todo.iter().map(|t| t.1).collect();
        masters.sort_unstable();
        masters.dedup();
        for &m in &masters {
            let mut packed = Vec::new();
            for &(i, _, asking) in todo.iter().filter(|t| t.1 == m) {
                if asking {
                    packed.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
                }
                packed.extend_from_slice(&cmds[i].packed);
            }
            self.conn(m, deadline)?.send(&packed, deadline)?;
        }
        let mut redirected = Vec::new();
        for &m in &masters {
            let conn = self.conn(m, deadline)?;
            for &(i, _, asking) in todo.iter().filter(|t| t.1 == m) {
                if asking {
                    conn.recv(deadline)?;
                }
                let v = conn.recv(deadline)?;
                if matches!(&v, Value::ServerError(e) if matches!(e.code(), "MOVED" | "ASK")) {
                    redirected.push(i);
                }
                out[i] = v;
            }
        }
        Ok(redirected)
    }
}

/// The masters and each hash slot's master.
type HashSlotMap = (Vec<Addr>, Vec<u16>, Option<RespConn>);

/// `CLUSTER SLOTS` from `seed`: the masters, each hash slot's master, and the
/// connection to the seed.
fn hash_slot_map(
    seed: &Addr,
    endpoint: &Endpoint,
    deadline: Instant,
) -> Result<HashSlotMap, BatchError> {
    let mut conn = RespConn::open(endpoint, deadline)?;
    let packed = redis::cmd("CLUSTER").arg("SLOTS").get_packed_command();
    conn.send(&packed, deadline)?;
    let v = conn.recv(deadline)?;
    let bad = |why: &str| BatchError::Failed(format!("CLUSTER SLOTS: {why}"));
    let Value::Array(ranges) = &v else {
        return Err(bad(&format!("answered {v:?}")));
    };
    let mut masters: Vec<Addr> = Vec::new();
    let mut hash_slots = vec![NONE; HASH_SLOTS];
    for r in ranges {
        let Value::Array(r) = r else {
            return Err(bad("a range is not an array"));
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (r.first(), r.get(1), r.get(2))
        else {
            return Err(bad("a range is not [start, end, [host, port, ...], ...]"));
        };
        let host = match node.first() {
            // No address known: the one we asked.
            Some(Value::BulkString(h)) if h.is_empty() => seed.host.clone(),
            Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
            _ => return Err(bad("a master has no host")),
        };
        let port = match node.get(1) {
            Some(&Value::Int(p)) => u16::try_from(p).map_err(|_| bad("a port out of range"))?,
            _ => return Err(bad("a master has no port")),
        };
        if host == "?" {
            return Err(bad("a master's address is unknown"));
        }
        let i = match masters
            .iter()
            .position(|m| m.host == host && m.port == port)
        {
            Some(i) => i,
            None if masters.len() < MAX_NODES => {
                masters.push(Addr { host, port, db: 0 });
                masters.len() - 1
            }
            None => return Err(bad("too many masters")),
        };
        let (start, end) = (*start, *end);
        if start < 0 || end >= HASH_SLOTS as i64 || start > end {
            return Err(bad("a slot range out of bounds"));
        }
        for s in &mut hash_slots[start as usize..=end as usize] {
            *s = i as u16;
        }
    }
    Ok((masters, hash_slots, Some(conn)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_slots_as_redis_computes_them() {
        // The CRC of the Redis Cluster spec's example, and `CLUSTER KEYSLOT`s.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"bar"), 5061);
        // A hash tag: the first non-empty {...} only.
        assert_eq!(hash_slot(b"rl:{api}:gcra"), hash_slot(b"api"));
        assert_eq!(hash_slot(b"rl:{api}:gcra"), hash_slot(b"x{api}:leases{zz}"));
        assert_eq!(hash_slot(b"{}foo"), crc16(b"{}foo") % 16384);
        assert_eq!(hash_slot(b"a{b"), crc16(b"a{b") % 16384);
    }
}
