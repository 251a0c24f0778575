//! What a process holds, read from /proc: its threads by name, its
//! sockets by kind, its other open files (reload.rs).

use std::collections::BTreeMap;
use std::fs;
use std::time::{Duration, Instant};

use ats_tests::wait_until;

/// Threads (by name), sockets (by kind) and other open files of a process
/// (but ATS's own log files).
#[derive(Debug, PartialEq, Eq)]
pub struct Level {
    pub threads: BTreeMap<String, usize>,
    /// `tcp`, `udp`, `unix` (from /proc/PID/net), or `other`.
    pub sockets: BTreeMap<&'static str, usize>,
    /// What the other descriptors are (`pipe`, `anon_inode:[eventfd]`, a path).
    pub files: BTreeMap<String, usize>,
}

/// ATS's own logs, which its logging opens and closes by itself (access.log
/// was seen closed after the reloads, on 9.2). Any other file under the log
/// directory (a plugin's log) counts.
const ATS_LOGS: &[&str] = &["access", "squid", "diags", "error", "traffic", "manager"];

fn ats_log(path: &str) -> bool {
    let Some((dir, name)) = path.rsplit_once('/') else {
        return false;
    };
    dir.ends_with("/log") && ATS_LOGS.iter().any(|l| name.starts_with(l))
}

/// The socket inodes of `pid`.
fn socket_inodes(pid: u32) -> Vec<u64> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .flatten()
        .filter_map(|fd| {
            let t = fs::read_link(fd.path()).ok()?;
            let t = t.to_string_lossy();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Rows of /proc/PID/net/`table` (tcp, tcp6, udp, udp6): (local port,
/// remote port, inode).
fn net_rows(pid: u32, table: &str) -> Vec<(u16, u16, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
    let port = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .unwrap_or(0)
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((port(f.get(1)?), port(f.get(2)?), f.get(9)?.parse().ok()?))
        })
        .collect()
}

/// The inodes of the unix sockets of the host.
fn unix_inodes(pid: u32) -> Vec<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(6)?.parse().ok())
        .collect()
}

pub fn level(pid: u32) -> Level {
    let mut threads = BTreeMap::new();
    for t in fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/PID/task")
        .flatten()
    {
        let name = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        *threads.entry(name.trim().to_owned()).or_insert(0) += 1;
    }
    let mut files = BTreeMap::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .flatten()
    {
        let target = fs::read_link(fd.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if target.starts_with("socket:") || ats_log(&target) {
            continue;
        }
        let kind = if target.starts_with("pipe:") {
            "pipe".to_owned()
        } else {
            target.into_owned()
        };
        *files.entry(kind).or_insert(0) += 1;
    }
    let inet = |tables: &[&str]| -> Vec<u64> {
        tables
            .iter()
            .flat_map(|t| net_rows(pid, t))
            .map(|(_, _, inode)| inode)
            .collect()
    };
    let (tcp, udp, unix) = (
        inet(&["tcp", "tcp6"]),
        inet(&["udp", "udp6"]),
        unix_inodes(pid),
    );
    let mut sockets = BTreeMap::new();
    for inode in socket_inodes(pid) {
        let kind = if tcp.contains(&inode) {
            "tcp"
        } else if udp.contains(&inode) {
            "udp"
        } else if unix.contains(&inode) {
            "unix"
        } else {
            "other"
        };
        *sockets.entry(kind).or_insert(0) += 1;
    }
    Level {
        threads,
        sockets,
        files,
    }
}

/// The plugins' sockets that can be told apart: connections to the store
/// at `store_port`, and the UDP socket bound to `peer_port`.
pub fn plugin_sockets(pid: u32, store_port: u16, peer_port: u16) -> (usize, usize) {
    let mine = socket_inodes(pid);
    let count = |tables: &[&str], f: &dyn Fn(u16, u16) -> bool| {
        tables
            .iter()
            .flat_map(|t| net_rows(pid, t))
            .filter(|(l, r, inode)| f(*l, *r) && mine.contains(inode))
            .count()
    };
    (
        count(&["tcp", "tcp6"], &|_, r| r == store_port),
        count(&["udp", "udp6"], &|l, _| l == peer_port),
    )
}

/// A level read twice, 300 ms apart, the same (at most 20 s): what a
/// process that has settled after its requests holds.
pub fn steady(pid: u32) -> Level {
    let mut last = level(pid);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = level(pid);
        if now == last || Instant::now() > end {
            assert_eq!(now, last, "the process did not settle in 20 s");
            return now;
        }
        last = now;
    }
}

pub fn sockets(l: &Level) -> usize {
    l.sockets.values().sum()
}

pub fn total(l: &Level) -> usize {
    l.threads.values().sum()
}

/// Waits (at most 20 s) for the process to come back to `want`; the last
/// level seen.
pub fn settle(pid: u32, want: &Level) -> Level {
    let mut now = level(pid);
    wait_until(Duration::from_secs(20), || {
        now = level(pid);
        now == *want
    });
    now
}
