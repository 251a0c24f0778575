//! `ats-bench tls`: what rate_limit.so's global mode (TLS connections per
//! SNI at the client hello, issue 29) costs per connection, and what it
//! does against a flood.
//!
//! 1. Instructions per TLS connection under callgrind (`icount.rs`): no
//!    plugin, ours accepting, ours refusing, and on 10.x upstream's
//!    rate_limit.so accepting and refusing with the same YAML; each its own
//!    traffic_server.
//! 2. A flood (`flood.rs`, the flooder in `flooder.rs`): ~2,000 connections
//!    a second from 127.0.0.2 against a `per-ip` selector, a light client's
//!    handshakes from 127.0.0.3 unloaded and under the flood, and
//!    traffic_server's CPU.
//!
//! The clients are Python's `ssl` (`client.rs`, bench/tls/client.py), the
//! markdown is `report.rs` (the flood's part in `flood.rs`).

mod client;
mod flood;
mod flooder;
mod icount;
mod report;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;

use ats_tests::{TrafficServer, TsBuilder};

use crate::report::Context;

pub const USAGE: &str = "\
usage: ats-bench tls [--smoke] [--out FILE] [options]

  --smoke            5 connections per window, 1 repetition, a 2.5 s flood; FILE is not written
  --out FILE         update the generated tls section of FILE (e.g. BENCHMARKS.md)
  --connections N    TLS connections per callgrind window (default 100)
  --reps N           callgrind windows per configuration; the median is reported (default 3)
  --flood-rate N     the flooder's connections per second (default 2000)
  --light N          the light client's handshakes, 50 ms apart (default 200: 10 s)
  --dumps DIR        keep callgrind's dump files there (default: a temp dir, removed)
  --no-icount, --no-flood
                     skip a part
";

#[derive(Clone, Debug)]
pub struct Args {
    pub smoke: bool,
    pub out: Option<PathBuf>,
    pub connections: u64,
    pub warmup: u64,
    pub reps: usize,
    pub flood_rate: f64,
    pub light: u64,
    pub dumps: Option<PathBuf>,
    pub icount: bool,
    pub flood: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let smoke = argv.iter().any(|a| a == "--smoke");
    let mut a = Args {
        smoke,
        out: None,
        connections: if smoke { 5 } else { 100 },
        warmup: if smoke { 2 } else { 10 },
        reps: if smoke { 1 } else { 3 },
        flood_rate: 2000.0,
        light: if smoke { 20 } else { 200 },
        dumps: None,
        icount: true,
        flood: true,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        let num = |v: String| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{arg}: '{v}' is not a valid number"))
        };
        match arg.as_str() {
            "--smoke" => {}
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--connections" => a.connections = num(value()?)?,
            "--reps" => a.reps = num(value()?)? as usize,
            "--flood-rate" => a.flood_rate = num(value()?)? as f64,
            "--light" => a.light = num(value()?)?,
            "--dumps" => a.dumps = Some(PathBuf::from(value()?)),
            "--no-icount" => a.icount = false,
            "--no-flood" => a.flood = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.smoke && a.out.is_some() {
        return Err("--smoke numbers are meaningless: not writing them to --out".into());
    }
    if a.connections == 0 || a.reps == 0 || a.flood_rate < 1.0 || a.light == 0 {
        return Err("--connections, --reps, --flood-rate and --light must be > 0".into());
    }
    Ok(a)
}

/// The SNI every measured connection sends (the harness's certificate is
/// for `*.test`).
pub const SNI: &str = "bench.test";
/// The flood's source, and the light client's.
pub const FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const LIGHT: &str = "127.0.0.3";
/// The connection that keeps a `limit: 1` selector full in the refused windows.
pub const HOLDER: &str = "127.0.0.4";
/// The measured connections' source.
pub const CLIENT: &str = "127.0.0.1";

/// A selector that never refuses: every connection takes its normal path
/// (a slot taken at the client hello, given back at VCONN_CLOSE).
pub fn yaml_accept() -> String {
    format!("selector:\n  - sni: {SNI}\n    limit: 1000000\n")
}
/// Full once one connection is held open: every other connection is
/// refused at the client hello, in ours and in upstream's.
pub fn yaml_refuse() -> String {
    format!("selector:\n  - sni: {SNI}\n    limit: 1\n")
}
/// The flood's selector: each address at most 20 connections at once and
/// 50 new ones a second.
pub fn yaml_flood() -> String {
    format!("selector:\n  - sni: {SNI}\n    per-ip:\n      limit: 20\n      rate: 50\n")
}

/// records for every traffic_server of this bench, besides the load
/// bench's (`crate::ATS_RECORDS`). No session tickets: with them, a client
/// that closes while tickets are in flight resets the connection instead of
/// closing it, and ATS takes another path for it (counts then vary with
/// timing). A handshaken connection that sends no request (the held one)
/// must not time out during a window slowed down by callgrind.
pub const TLS_RECORDS: &[(&str, &str)] = &[
    ("proxy.config.ssl.server.session_ticket.enable", "INT 0"),
    ("proxy.config.ssl.server.session_ticket.number", "INT 0"),
    ("proxy.config.http.accept_no_activity_timeout", "INT 3600"),
];

/// Which rate_limit.so a server loads, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    None,
    Ours,
    Upstream,
}

impl Plugin {
    pub fn so(self) -> Option<String> {
        let p = match self {
            Plugin::None => return None,
            Plugin::Ours => ats_tests::plugin("rate_limit"),
            Plugin::Upstream => ats_tests::ats::upstream_plugin("rate_limit"),
        };
        // callgrind names an object by its real path.
        Some(
            std::fs::canonicalize(&p)
                .map(|c| c.display().to_string())
                .unwrap_or(p),
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Plugin::None => "no plugin",
            Plugin::Ours => "our rate_limit.so",
            Plugin::Upstream => "upstream rate_limit.so (C++)",
        }
    }
}

/// A traffic_server with a TLS port, loading `plugin` with `yaml` (by
/// absolute path: upstream opens it as given), in `root`.
pub fn builder(plugin: Plugin, yaml: &str, root: &std::path::Path) -> TsBuilder {
    let mut b = TrafficServer::builder().root(root).tls();
    if let Some(so) = plugin.so() {
        let file = root.join("etc/global.yaml");
        b = b
            .plugin_config(format!("{so} {}\n", file.display()))
            .config_file("global.yaml", yaml);
    }
    for (k, v) in crate::ATS_RECORDS.iter().chain(TLS_RECORDS) {
        b = b.record(k, v);
    }
    b
}

fn run(args: &Args) -> Result<String, String> {
    if !std::path::Path::new(client::PYTHON).is_file() {
        return Err(format!("{} is missing (the TLS client)", client::PYTHON));
    }
    let machine = crate::sys::Machine::probe();
    let argv: Vec<String> = std::env::args().collect();
    let command = match std::env::var("ATS_BENCH_COMMAND") {
        Ok(c) if !c.is_empty() => format!("{c}` (ran `{}", argv.join(" ")) + ")",
        _ => argv.join(" "),
    };
    let ctx = Context {
        machine: &machine,
        command,
    };
    let icount = if args.icount {
        Some(icount::run(args)?)
    } else {
        None
    };
    let mut floods = Vec::new();
    if args.flood {
        for plugin in [Plugin::None, Plugin::Ours] {
            floods.push((plugin, flood::measure(args, plugin)?));
        }
    }
    Ok(report::section(&ctx, args, icount.as_ref(), &floods))
}

/// The BENCHMARKS.md section of the Traffic Server under test.
fn section_name() -> String {
    match ats_tests::ats::version() {
        (9, _) => "tls".to_owned(),
        (major, minor) => format!("tls-{major}.{minor}"),
    }
}

pub fn main(argv: &[String]) -> ExitCode {
    let args = match crate::report::args_or_exit("ats-bench tls", USAGE, parse_args(argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&args) {
        Ok(body) => {
            crate::sections::publish("ats-bench tls", &section_name(), body, args.out.as_deref())
        }
        Err(e) => {
            eprintln!("ats-bench tls: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options() {
        let a = args(&[]).expect("defaults");
        assert_eq!((a.connections, a.reps, a.light), (100, 3, 200));
        let s = args(&["--smoke", "--no-flood"]).expect("valid");
        assert_eq!((s.connections, s.reps), (5, 1));
        assert!(!s.flood && s.icount);
        assert!(args(&["--smoke", "--out", "B.md"]).is_err());
        assert!(args(&["--reps", "0"]).is_err());
        assert!(args(&["--bogus"]).is_err());
    }
}
