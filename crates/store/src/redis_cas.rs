//! Redis as a [`CasStore`] (ip_throttle's shared per-IP records on
//! Redis): a pipelined `GET` per key reads it, and [`CAS`], one script per
//! write, stores or deletes it only if it still holds what was read. The
//! value itself is the version: a record names its times, so equal bytes
//! mean an equal state.
//!
//! Each key is read and written on its own (one key per command), so keys
//! may live on any Redis Cluster slot: on a Cluster, each round trip is one
//! pipeline per master ([`crate::redis_cluster`]).

use std::time::Instant;

use redis::Value;

use crate::client::BatchError;
use crate::redis_cluster::Routed;
use crate::redis_conn::Conn;
use crate::resp::server_error;
use crate::rmw::{CasStore, CasWrite};
use store_url::Target;

/// Longest value read back; a longer one is not ours.
pub const MAX_VALUE: usize = 4096;
/// Longest key (ours are far shorter).
pub const MAX_KEY: usize = 512;

/// The conditional write. KEYS[1]; ARGV: `1` if the read found a value
/// (else `0`), the value read, `1` to store (else delete), the new value,
/// its TTL in seconds. Returns 1 if written, 0 if the key changed since.
pub const CAS: &str = r#"
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[4], 'EX', ARGV[5])
else
  redis.call('DEL', KEYS[1])
end
return 1
"#;

pub struct RedisCas {
    conn: Conn,
    sha: String,
}

impl RedisCas {
    /// `target`: an [`Addr`](store_url::Addr) (one server) or a [`Target`].
    pub fn new(target: impl Into<Target>) -> Result<RedisCas, String> {
        Ok(RedisCas {
            conn: Conn::new(&target.into())?,
            sha: String::new(),
        })
    }

    fn load_script(&mut self, deadline: Instant, connect: bool) -> Result<(), BatchError> {
        let shas = if connect {
            self.conn.connect(&[CAS], deadline)?
        } else {
            self.conn.load_scripts(&[CAS], deadline)?
        };
        self.sha = shas
            .into_iter()
            .next()
            .ok_or_else(|| BatchError::Failed("SCRIPT LOAD answered nothing".into()))?;
        Ok(())
    }
}

impl CasStore for RedisCas {
    /// The value read.
    type Version = Vec<u8>;

    fn valid_key(&self, key: &str) -> bool {
        !key.is_empty() && key.len() <= MAX_KEY
    }

    fn server_of(&self, _key: &str) -> usize {
        0
    }

    fn servers(&self) -> usize {
        1
    }

    fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.load_script(deadline, true)
    }

    fn disconnect(&mut self) {
        self.conn.disconnect();
    }

    fn read(
        &mut self,
        _server: usize,
        keys: &[&str],
        deadline: Instant,
    ) -> Result<Vec<Option<(Vec<u8>, Vec<u8>)>>, BatchError> {
        let cmds: Vec<Routed> = keys
            .iter()
            .map(|k| Routed::new(k.as_bytes(), redis::cmd("GET").arg(*k)))
            .collect();
        let values = self.conn.query(&cmds, deadline)?;
        values
            .into_iter()
            .map(|v| match v {
                Value::Nil => Ok(None),
                Value::BulkString(b) if b.len() <= MAX_VALUE => Ok(Some((b.clone(), b))),
                Value::BulkString(b) => Err(BatchError::Failed(format!(
                    "redis: a {}-byte value (at most {MAX_VALUE})",
                    b.len()
                ))),
                other => Err(BatchError::Failed(
                    server_error(&other)
                        .unwrap_or_else(|| format!("redis: GET answered {other:?}")),
                )),
            })
            .collect()
    }

    fn write(
        &mut self,
        _server: usize,
        writes: &[CasWrite<'_, Vec<u8>>],
        deadline: Instant,
    ) -> Result<Vec<bool>, BatchError> {
        let mut cmds = Vec::with_capacity(writes.len());
        for w in writes {
            let (store, value, ttl) = match w.value {
                Some((v, ttl)) => ("1", v, ttl.max(1)),
                None => ("0", &[][..], 0),
            };
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.sha)
                .arg(1)
                .arg(w.key)
                .arg(if w.read.is_some() { "1" } else { "0" })
                .arg(w.read.map_or(&[][..], |v| v.as_slice()))
                .arg(store)
                .arg(value)
                .arg(ttl);
            cmds.push(Routed::new(w.key.as_bytes(), &c));
        }
        let values = self.conn.query(&cmds, deadline)?;
        let mut noscript = false;
        let lost = values
            .iter()
            .map(|v| match v {
                Value::Int(1) => Ok(false),
                Value::Int(0) => Ok(true),
                // The server lost the script (a restart, SCRIPT FLUSH): load
                // it again; these writes count as lost races and run again.
                Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                    noscript = true;
                    Ok(true)
                }
                other => Err(BatchError::Failed(
                    server_error(other).unwrap_or_else(|| format!("redis: CAS answered {other:?}")),
                )),
            })
            .collect::<Result<Vec<bool>, BatchError>>()?;
        if noscript {
            self.load_script(deadline, false)?;
        }
        Ok(lost)
    }
}
