//! `dthrottled`: DThrottle's daemon for applications other than Traffic
//! Server. A client sends a throttling tag and `\n` and reads `OK\n` (serve)
//! or `NO\n` (throttle); instances share their buckets' hits over
//! authenticated UDP (crates/peer), so a client behind a load balancer gets
//! the configured rate across the fleet, not per machine.
//!
//! Usage: `dthrottled [--config FILE] [--check] [--version]`. Startup lines on stderr
//! say where it listens (`listening on tcp 127.0.0.1:7411`), which tests
//! and supervisors read.

#![forbid(unsafe_code)]

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dthrottled::config::{self, Config};
use dthrottled::server::Server;

/// Where the Debian package installs it (ci/package.sh).
const DEFAULT_CONFIG: &str = "/etc/dthrottled/dthrottled.conf";

fn main() {
    if let Err(e) = run() {
        eprintln!("dthrottled: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut path = DEFAULT_CONFIG.to_string();
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" | "-c" => path = args.next().ok_or("--config needs a FILE")?,
            "--check" => check = true,
            "--help" | "-h" => {
                println!(
                    "usage: dthrottled [--config FILE (default {DEFAULT_CONFIG})] [--check] [--version]"
                );
                return Ok(());
            }
            "--version" | "-V" => {
                println!("dthrottled {}", env!("CARGO_PKG_VERSION"));
                return Ok(());
            }
            _ => return Err(format!("unknown argument {a:?} (see --help)")),
        }
    }
    let config = config::load(&path, &optspec::files::FsFiles)?;
    let key = match &config.peer_secret_file {
        Some(f) if config.peering() => Some(peer::Key::from_file(f)?),
        _ => None,
    };
    if check {
        println!("dthrottled: config file {path} is valid");
        return Ok(());
    }
    warn_if_descriptors_are_short(config.max_connections);
    let server = Arc::new(Server::new(&config));
    for addr in &config.listen_tcp {
        let l = TcpListener::bind(addr).map_err(|e| format!("listen_tcp {addr}: {e}"))?;
        let local = l.local_addr().map_err(|e| e.to_string())?;
        eprintln!("dthrottled: listening on tcp {local}");
        let s = server.clone();
        spawn("dthrottled-tcp", move || accept_tcp(&l, &s))?;
    }
    if let Some(p) = &config.listen_unix {
        let l = bind_unix(p, config.unix_mode)
            .map_err(|e| format!("listen_unix {}: {e}", p.display()))?;
        eprintln!("dthrottled: listening on unix {}", p.display());
        let s = server.clone();
        spawn("dthrottled-unix", move || accept_unix(&l, &s))?;
    }
    let transport = key.and_then(|key| start_peering(&config, key));
    let mut next_report = Instant::now() + config.period;
    let mut next_stats = config.stats_interval.map(|i| Instant::now() + i);
    // This thread applies peers' reports and sends ours every period.
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let now = Instant::now();
        if let Some(t) = &transport {
            while let Some(dg) = t.recv() {
                // rate_limit's blocks (`--block`) have no meaning for the
                // daemon's buckets: only hits are applied.
                if *dg.group == *config.peer_name.as_bytes() && dg.kind == peer::Kind::Hits {
                    for (tag, hits) in &dg.entries {
                        server.buckets.apply_peer(tag, *hits);
                    }
                }
            }
            if now >= next_report {
                next_report += config.period;
                if next_report < now {
                    next_report = now + config.period;
                }
                let r = server.buckets.report();
                if !r.entries.is_empty() {
                    t.send(peer::Outgoing {
                        group: config.peer_name.as_bytes().into(),
                        kind: peer::Kind::Hits,
                        entries: r.entries,
                    });
                }
            }
        } else if now >= next_report {
            // Alone: still reset the hit counts and drain the evicted tags'
            // hits, so neither grows without bound.
            next_report = now + config.period;
            server.buckets.report();
        }
        if let (Some(at), Some(every)) = (next_stats, config.stats_interval) {
            if now >= at {
                next_stats = Some(now + every);
                eprintln!("{}", stats_line(&server, transport.as_ref()));
            }
        }
    }
}

/// The transport, or `None` (logged) when its socket cannot be opened: the
/// daemon then limits locally.
fn start_peering(c: &Config, key: peer::Key) -> Option<peer::Transport> {
    let t = peer::Transport::start(peer::Config {
        listen: c.peer_listen,
        peers: c.peers.clone(),
        group: c.peer_group,
        multicast_interface: c.peer_interface,
        multicast_ttl: 1,
        key,
        policy: peer::Policy {
            allowed: c.peer_allow.clone(),
            window_ms: c.replay_window.as_millis() as u64,
            max_senders: c.peer_max_senders,
        },
        inbound_capacity: 4096,
        outbound_capacity: 16,
    });
    match t {
        Ok(t) => {
            eprintln!("dthrottled: peer socket {}", t.local_addr());
            Some(t)
        }
        Err(e) => {
            eprintln!("dthrottled: peer exchange disabled, limiting locally: {e}");
            None
        }
    }
}

fn stats_line(s: &Server, t: Option<&peer::Transport>) -> String {
    let c = &s.counters;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let b = s.buckets.stats();
    let mut line = format!(
        "dthrottled: stats ok={} no={} full={} long_lines={} empty_lines={} connections={} active={} \
         refused_connections={} evicted_connections={} write_timeouts={} tags={} evicted={} peer_hits_applied={} \
         peer_hits_dropped={} report_dropped_tags={} evicted_hits_dropped={}",
        l(&c.ok),
        l(&c.no),
        l(&c.full),
        l(&c.long_lines),
        l(&c.empty_lines),
        l(&c.connections),
        c.active.load(Ordering::Relaxed),
        l(&c.refused_connections),
        l(&c.evicted_connections),
        l(&c.write_timeouts),
        b.tags,
        b.evicted,
        b.peer_hits_applied,
        b.peer_hits_dropped,
        b.report_dropped_tags,
        b.evicted_hits_dropped
    );
    if let Some(t) = t {
        let p = t.stats();
        line += &format!(
            " peer_reports_sent={} peer_datagrams_sent={} peer_bytes_sent={} peer_datagrams_received={} \
             peer_rejected={} peer_senders_dropped={} peer_bad={} peer_send_errors={}",
            p.reports_sent,
            p.datagrams_sent,
            p.bytes_sent,
            p.datagrams_received,
            p.rejected(),
            p.senders_dropped,
            p.bad(),
            p.send_errors
        );
    }
    line
}

/// Descriptors the daemon holds besides its connections (stdio, listeners,
/// the peer socket, files being read), with room to spare.
const OTHER_DESCRIPTORS: u64 = 32;

/// Warns when `max_connections` (one descriptor each) cannot all be open
/// under RLIMIT_NOFILE: accept would fail (EMFILE) before the daemon's own
/// limit, and new clients would wait in the backlog instead.
fn warn_if_descriptors_are_short(max_connections: usize) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(soft) = soft_nofile(&limits) {
        let need = max_connections as u64 + OTHER_DESCRIPTORS;
        if need > soft {
            eprintln!(
                "dthrottled: warning: max_connections = {max_connections} needs about {need} file \
                 descriptors but RLIMIT_NOFILE allows {soft}: raise it (ulimit -n, LimitNOFILE=) \
                 or lower max_connections"
            );
        }
    }
}

/// The soft "Max open files" limit from `/proc/self/limits` text (None:
/// unknown or unlimited).
fn soft_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("starting thread {name}: {e}"))
}

/// Binds the Unix socket, replacing a stale socket file (never another kind
/// of file), with `mode` permissions.
fn bind_unix(path: &Path, mode: u32) -> io::Result<UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(l)
}

fn accept_tcp(l: &TcpListener, s: &Arc<Server>) {
    for c in l.incoming() {
        match c {
            Ok(c) => s.spawn::<TcpStream>(c),
            // Out of descriptors and the like: do not spin.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn accept_unix(l: &UnixListener, s: &Arc<Server>) {
    for c in l.incoming() {
        match c {
            Ok(c) => s.spawn::<UnixStream>(c),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::soft_nofile;

    #[test]
    fn the_soft_descriptor_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63418                63418                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(soft_nofile(text), Some(1024));
        assert_eq!(
            soft_nofile(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
        assert_eq!(soft_nofile(""), None);
        // This machine's own limits parse.
        let own = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        assert!(soft_nofile(&own).is_some_and(|n| n > 0), "{own}");
    }
}
