//! A Redis Cluster for the store tests: three masters, no replicas, each a
//! redis-server (`--cluster-enabled yes`) in its own directory on a
//! loopback port, joined by `redis-cli --cluster create`; killed on drop.

use std::net::TcpListener;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis::{ensure_installed, ensure_package, free_port, Redis};

pub struct RedisCluster {
    nodes: Vec<Redis>,
}

/// A free port P with P + 10000 (the cluster bus) free too.
fn cluster_port() -> Result<u16, String> {
    for _ in 0..100 {
        let p = free_port()?;
        if p <= 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return Ok(p);
        }
    }
    Err("no free loopback port P with P+10000 free (cluster bus)".into())
}

impl RedisCluster {
    /// Starts three masters, creates the cluster and waits (at most 20 s)
    /// until every node says `cluster_state:ok`.
    pub fn start() -> Result<RedisCluster, String> {
        ensure_installed()?;
        ensure_package("redis-cli", &["--version"], &["redis-tools"])?;
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let nodes = (0..3)
            .map(|_| Redis::start_with(&args, cluster_port))
            .collect::<Result<Vec<Redis>, String>>()?;
        let c = RedisCluster { nodes };
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(c.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        c.wait_ok(Duration::from_secs(20))?;
        Ok(c)
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// Node `i`, to stop and restart (it keeps its `nodes.conf`, so it
    /// rejoins as the same master).
    pub fn node_mut(&mut self, i: usize) -> &mut Redis {
        &mut self.nodes[i]
    }

    /// Waits (at most `within`) until every node says `cluster_state:ok`.
    pub fn wait_ok(&self, within: Duration) -> Result<(), String> {
        let end = Instant::now() + within;
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .map(|n| n.command(&["CLUSTER", "INFO"]).unwrap_or_default())
                .collect();
            if infos.iter().all(|i| i.contains("cluster_state:ok")) {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!(
                    "the cluster is not ok after {within:?}:\n{}",
                    infos.join("\n")
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the node serving `key`: the one that does not
    /// redirect a `GET` of it.
    pub fn node_of(&self, key: &str) -> Result<usize, String> {
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.command(&["GET", key])?.starts_with("-MOVED") {
                return Ok(i);
            }
        }
        Err(format!("no node serves {key}"))
    }

    /// `CLUSTER MYID` of node `i`.
    pub fn id(&self, i: usize) -> Result<String, String> {
        let a = self.nodes[i].command(&["CLUSTER", "MYID"])?;
        a.split("\r\n")
            .nth(1)
            .map(str::to_owned)
            .ok_or_else(|| format!("CLUSTER MYID answered {a:?}"))
    }

    /// Sends one command to the node that serves `key` and returns the raw answer.
    pub fn command(&self, key: &str, args: &[&str]) -> Result<String, String> {
        self.nodes[self.node_of(key)?].command(args)
    }

    /// The number of keys each master holds (`DBSIZE`).
    pub fn keys_per_node(&self) -> Vec<i64> {
        self.nodes
            .iter()
            .map(|n| n.int(&["DBSIZE"]).unwrap_or(-1))
            .collect()
    }

    pub fn logs(&self) -> String {
        self.nodes.iter().map(Redis::logs).collect()
    }
}
