//! The connection both Redis backends ([`crate::redis`] and
//! [`crate::redis_cas`]) send their batches on: one server, or the masters
//! of a Redis Cluster ([`crate::redis_cluster`]). The backends build their
//! commands and read the answers the same way for both; only the routing
//! differs. Every read and write is bounded by what is left of the batch's
//! deadline.

use std::time::{Duration, Instant};

use redis::Value;

use crate::client::BatchError;
use crate::redis::Addr;
use crate::redis_cluster::{slot, Cluster};

/// Where the data is: one server (`redis://`) or a Cluster (`redis+cluster://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Node(Addr),
    /// Seed nodes, tried in order for the slot map (a Cluster has only db 0).
    Cluster(Vec<Addr>),
}

impl Target {
    /// Written back normalised (for diags.log, and to share a client).
    pub fn url(&self) -> String {
        match self {
            Target::Node(a) => a.url(),
            Target::Cluster(seeds) => {
                let s: Vec<String> = seeds.iter().map(Addr::host_port).collect();
                format!("redis+cluster://{}", s.join(","))
            }
        }
    }
}

impl From<&Addr> for Target {
    fn from(a: &Addr) -> Target {
        Target::Node(a.clone())
    }
}

impl From<&Target> for Target {
    fn from(t: &Target) -> Target {
        t.clone()
    }
}

/// One command of a batch, packed, with the slot of the key it touches
/// (by which a Cluster routes it).
pub(crate) struct Routed {
    pub slot: u16,
    pub packed: Vec<u8>,
}

impl Routed {
    pub fn new(key: &[u8], cmd: &redis::Cmd) -> Routed {
        Routed {
            slot: slot(key),
            packed: cmd.get_packed_command(),
        }
    }
}

pub(crate) enum Conn {
    Node {
        client: redis::Client,
        conn: Option<redis::Connection>,
    },
    Cluster(Cluster),
}

impl Conn {
    pub fn new(target: &Target) -> Result<Conn, String> {
        Ok(match target {
            Target::Node(a) => Conn::Node {
                client: redis::Client::open(a.url()).map_err(|e| e.to_string())?,
                conn: None,
            },
            Target::Cluster(seeds) => Conn::Cluster(Cluster::new(seeds.clone())),
        })
    }

    pub fn is_connected(&self) -> bool {
        match self {
            Conn::Node { conn, .. } => conn.is_some(),
            Conn::Cluster(c) => c.is_connected(),
        }
    }

    pub fn disconnect(&mut self) {
        match self {
            Conn::Node { conn, .. } => *conn = None,
            Conn::Cluster(c) => c.disconnect(),
        }
    }

    /// Connects (a Cluster: learns its slot map and connects to every
    /// master) and loads `scripts` (on every master); their SHA1s.
    pub fn connect(
        &mut self,
        scripts: &[&str],
        deadline: Instant,
    ) -> Result<Vec<String>, BatchError> {
        let named = |e| match e {
            BatchError::Failed(e) => BatchError::Failed(format!("cannot load the scripts: {e}")),
            t => t,
        };
        match self {
            Conn::Node { client, conn } => {
                let mut c = open(client, deadline)?;
                let shas = load_scripts(&mut c, scripts, deadline).map_err(named)?;
                *conn = Some(c);
                Ok(shas)
            }
            Conn::Cluster(c) => {
                c.connect(deadline)?;
                c.load_scripts(scripts, deadline).map_err(|e| {
                    c.disconnect();
                    named(e)
                })
            }
        }
    }

    /// Loads `scripts` again (after `NOSCRIPT`: a restart, `SCRIPT FLUSH`,
    /// a failover); their SHA1s.
    pub fn load_scripts(
        &mut self,
        scripts: &[&str],
        deadline: Instant,
    ) -> Result<Vec<String>, BatchError> {
        match self {
            Conn::Node { conn, .. } => load_scripts(connected(conn)?, scripts, deadline),
            Conn::Cluster(c) => c.load_scripts(scripts, deadline),
        }
    }

    /// Sends `cmds` (one pipeline per server) and reads one answer per
    /// command, in order. Error replies are answers (`Value::ServerError`);
    /// `Err`: the connection is unusable.
    pub fn query(&mut self, cmds: &[Routed], deadline: Instant) -> Result<Vec<Value>, BatchError> {
        match self {
            Conn::Node { conn, .. } => {
                let packed: Vec<u8> = cmds.iter().flat_map(|c| c.packed.iter().copied()).collect();
                exchange(connected(conn)?, &packed, cmds.len(), deadline)
            }
            Conn::Cluster(c) => c.query(cmds, deadline),
        }
    }
}

fn connected(conn: &mut Option<redis::Connection>) -> Result<&mut redis::Connection, BatchError> {
    conn.as_mut()
        .ok_or_else(|| BatchError::Failed("not connected".into()))
}

pub(crate) fn open(
    client: &redis::Client,
    deadline: Instant,
) -> Result<redis::Connection, BatchError> {
    client
        .get_connection_with_timeout(left(deadline)?)
        .map_err(batch_error)
}

pub(crate) fn left(deadline: Instant) -> Result<Duration, BatchError> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(BatchError::Timeout)
    } else {
        Ok(d)
    }
}

pub(crate) fn batch_error(e: redis::RedisError) -> BatchError {
    if e.is_timeout() {
        BatchError::Timeout
    } else {
        BatchError::Failed(e.to_string())
    }
}

pub(crate) fn set_timeouts(conn: &redis::Connection, d: Duration) -> Result<(), BatchError> {
    conn.set_read_timeout(Some(d)).map_err(batch_error)?;
    conn.set_write_timeout(Some(d)).map_err(batch_error)
}

/// Sends `packed` (`n` commands) and reads the `n` answers, each read
/// bounded by what is left of the deadline: the pipeline's own `query`
/// fails the whole batch on one error reply, and keeps reading (a whole
/// timeout each) after a timeout.
pub(crate) fn exchange(
    conn: &mut redis::Connection,
    packed: &[u8],
    n: usize,
    deadline: Instant,
) -> Result<Vec<Value>, BatchError> {
    send(conn, packed, deadline)?;
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        values.push(recv(conn, deadline)?);
    }
    Ok(values)
}

pub(crate) fn send(
    conn: &mut redis::Connection,
    packed: &[u8],
    deadline: Instant,
) -> Result<(), BatchError> {
    set_timeouts(conn, left(deadline)?)?;
    conn.send_packed_command(packed).map_err(batch_error)
}

/// One answer, by the deadline.
pub(crate) fn recv(conn: &mut redis::Connection, deadline: Instant) -> Result<Value, BatchError> {
    conn.set_read_timeout(Some(left(deadline)?))
        .map_err(batch_error)?;
    conn.recv_response().map_err(batch_error)
}

/// Loads `scripts` in one round trip; their SHA1s for EVALSHA.
pub(crate) fn load_scripts(
    conn: &mut redis::Connection,
    scripts: &[&str],
    deadline: Instant,
) -> Result<Vec<String>, BatchError> {
    let mut p = redis::pipe();
    for s in scripts {
        p.cmd("SCRIPT").arg("LOAD").arg(*s);
    }
    let v = exchange(conn, &p.get_packed_pipeline(), scripts.len(), deadline)?;
    v.iter()
        .map(|v| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| BatchError::Failed(format!("SCRIPT LOAD answered {v:?}")))
}

/// `redis: CODE details` of an error reply.
pub(crate) fn server_error(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(format!(
            "redis: {} {}",
            e.code(),
            e.details().unwrap_or_default()
        )),
        _ => None,
    }
}
