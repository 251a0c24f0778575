//! The connection both Redis backends ([`crate::redis`] and
//! [`crate::redis_cas`]) send their batches on: one server, or the masters
//! of a Redis Cluster ([`crate::redis_cluster`]). The backends build their
//! commands and read the answers the same way for both; only the routing
//! differs. The wire (one server's connection, its deadline and reply cap)
//! is `resp`'s.

use std::time::Instant;

use redis::Value;

use crate::client::BatchError;
use crate::net::Endpoint;
use crate::redis_cluster::{Cluster, Routed};
use crate::resp::{exchange, load_scripts, select, RespConn};
use store_url::{Addr, Target};

pub(crate) enum Conn {
    Node {
        addr: Addr,
        endpoint: Endpoint,
        conn: Option<RespConn>,
    },
    Cluster(Cluster),
}

impl Conn {
    pub fn new(target: &Target) -> Result<Conn, String> {
        Ok(match target {
            Target::Node(a) => Conn::Node {
                addr: a.clone(),
                endpoint: Endpoint::new(&a.host, a.port),
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
            Conn::Node {
                addr,
                endpoint,
                conn,
            } => {
                let mut c = RespConn::open(endpoint, deadline)?;
                if addr.db != 0 {
                    select(&mut c, addr.db, deadline)?;
                }
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

fn connected(conn: &mut Option<RespConn>) -> Result<&mut RespConn, BatchError> {
    conn.as_mut()
        .ok_or_else(|| BatchError::Failed("not connected".into()))
}
