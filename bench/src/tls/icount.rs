//! Instructions per TLS connection under callgrind, as `ats-bench icount`
//! counts them per request (bench/src/icount.rs): traffic_server under
//! `valgrind --tool=callgrind` with the same quiet records, one client,
//! `callgrind_control --zero`, N connections one after the other (each a
//! full TLS 1.3 handshake and a close, or a handshake refused at the client
//! hello), a settle, `--dump`. Each configuration is its own traffic_server
//! (a global plugin is the process's), measured in `reps` windows.

use std::path::Path;
use std::time::{Duration, Instant};

use super::args::Args;
use super::client::{Hellos, Plan, Py};
use super::setup::{builder, Plugin, CLIENT, HOLDER, SNI};
use crate::callgrind::{callgrind_control, take_dump, Profile};
use crate::icount::{counted, QUIET};

/// One configuration: a plugin, and whether its connections are refused.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub plugin: Plugin,
    pub refused: bool,
}

impl Config {
    pub fn key(&self) -> String {
        let p = match self.plugin {
            Plugin::None => "none",
            Plugin::Ours => "ours",
            Plugin::Upstream => "upstream",
        };
        match (self.plugin, self.refused) {
            (Plugin::None, _) => p.to_owned(),
            (_, false) => format!("{p}-accepted"),
            (_, true) => format!("{p}-refused"),
        }
    }

    pub fn label(&self) -> String {
        match (self.plugin, self.refused) {
            (Plugin::None, _) => "no plugin".to_owned(),
            (p, false) => format!("{}, accepted (`limit: 1000000`)", p.label()),
            (p, true) => format!("{}, refused (`limit: 1`, one connection held)", p.label()),
        }
    }

    fn yaml(&self) -> String {
        if self.refused {
            super::setup::yaml_refuse()
        } else {
            super::setup::yaml_accept()
        }
    }
}

/// The configurations: upstream's only on 10.x, whose upstream global
/// mode reads this YAML (9.2's takes command-line options).
pub fn configs() -> Vec<Config> {
    let mut plugins = vec![Plugin::None, Plugin::Ours];
    if ats_tests::ats::is_10() {
        plugins.push(Plugin::Upstream);
    }
    let mut v = Vec::new();
    for plugin in plugins {
        v.push(Config {
            plugin,
            refused: false,
        });
        if plugin != Plugin::None {
            v.push(Config {
                plugin,
                refused: true,
            });
        }
    }
    v
}

#[derive(Debug)]
pub struct Window {
    pub config: usize,
    pub conns: u64,
    pub wall_s: f64,
    /// The whole process minus the cache's idle AIO threads (`icount::counted`).
    pub ir: u64,
    pub profile: Profile,
}

pub struct Results {
    pub configs: Vec<Config>,
    /// ELF object of each configuration's plugin ("" for none).
    pub objects: Vec<String>,
    pub windows: Vec<Window>,
    /// Per configuration: instructions per second with no connection at all.
    pub idle_per_s: Vec<f64>,
    /// Per configuration: what the client saw of its failed handshakes.
    pub failures: Vec<String>,
}

/// After the last connection's close, ATS still runs VCONN_CLOSE and frees
/// the connection, slower under callgrind than natively.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Accepted connections must all complete their handshake, refused ones
/// must all fail it: otherwise the window measured something else.
fn check(c: &Config, h: &Hellos, n: u64) -> Result<(), String> {
    let (good, what) = if c.refused {
        (h.failed == n && h.ok == 0, "be refused")
    } else {
        (h.ok == n && h.failed == 0, "complete their handshake")
    };
    if good {
        Ok(())
    } else {
        Err(format!(
            "{}: {} of {n} connections did not {what} ({} completed; failures: {})",
            c.label(),
            if c.refused { h.ok } else { h.failed },
            h.ok,
            h.error_summary()
        ))
    }
}

pub fn run(args: &Args) -> Result<Results, String> {
    let tmp = tempfile::Builder::new()
        .prefix("ats-bench-tls-icount-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dumps = crate::callgrind::dump_dir(args.dumps.as_deref(), tmp.path())?;
    let configs = configs();
    let mut res = Results {
        configs: configs.clone(),
        objects: configs
            .iter()
            .map(|c| c.plugin.so().unwrap_or_default())
            .collect(),
        windows: Vec::new(),
        idle_per_s: Vec::new(),
        failures: Vec::new(),
    };
    for (ci, c) in configs.iter().enumerate() {
        // Each server's dumps in a directory of their own: callgrind
        // numbers them per process, from 1.
        let dir = dumps.join(c.key());
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (idle, failures, windows) = measure(args, ci, c, &dir)?;
        res.idle_per_s.push(idle);
        res.failures.push(failures);
        res.windows.extend(windows);
    }
    Ok(res)
}

/// One configuration's server: warm-up, an idle window, then the windows.
fn measure(
    args: &Args,
    ci: usize,
    c: &Config,
    dumps: &Path,
) -> Result<(f64, String, Vec<Window>), String> {
    let root = tempfile::Builder::new()
        .prefix("ats-bench-tls-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let out_file = format!("--callgrind-out-file={}/callgrind.out", dumps.display());
    let mut b = builder(c.plugin, &c.yaml(), root.path())
        .wrapper(&[
            "nice",
            "-n",
            "10",
            "valgrind",
            "--tool=callgrind",
            &out_file,
        ])
        .start_timeout(Duration::from_secs(600))
        // Plugins loaded from where they are (not per-load copies), so
        // callgrind names the object by its path.
        .record("proxy.config.plugin.dynamic_reload_mode", "INT 0");
    for (k, v) in QUIET {
        b = b.record(k, v);
    }
    eprintln!("{}: starting traffic_server under callgrind...", c.label());
    let t0 = Instant::now();
    let ts = b
        .start()
        .map_err(|e| format!("{}: traffic_server did not start: {e:?}", c.label()))?;
    let pid = ts.server_pid().ok_or("cannot find traffic_server's pid")?;
    let port = ts.tls_port();
    eprintln!(
        "{}: pid {pid}, TLS port {port}, started in {:.0} s",
        c.label(),
        t0.elapsed().as_secs_f64()
    );
    let keep = args.dumps.is_some();
    let mut py = Py::spawn()?;
    if c.refused {
        py.hold(port, SNI, HOLDER)?;
    }
    let plan = |n| Plan {
        port,
        sni: SNI,
        source: CLIENT,
        n,
        interval_ms: 0,
        timeout_s: 60,
    };
    // The warm-up inside a window of its own, thrown away: the first window
    // with connections in a process counts ~3.5 M instructions more than
    // later ones (and than its own summary line), even after a first
    // zero/dump without connections. Later windows agree within 0.02 %.
    callgrind_control(pid, &["--zero"])?;
    let warm = py.hellos(plan(args.warmup))?;
    check(c, &warm, args.warmup)?;
    let mut failures = warm.error_summary();
    std::thread::sleep(SETTLE);
    let hint = format!("tls-warmup-{}", c.key());
    callgrind_control(pid, &[&format!("--dump={hint}")])?;
    let w = take_dump(dumps, &hint, keep)?;
    eprintln!(
        "warm-up {:>15}: {:>10.0} Ir/connection",
        c.key(),
        counted(&w) as f64 / args.warmup as f64
    );

    let mut windows = Vec::new();
    for rep in 0..args.reps {
        std::thread::sleep(SETTLE);
        callgrind_control(pid, &["--zero"])?;
        let t = Instant::now();
        let h = py.hellos(plan(args.connections))?;
        std::thread::sleep(SETTLE);
        let hint = format!("tls-{}-{rep}", c.key());
        callgrind_control(pid, &[&format!("--dump={hint}")])?;
        let wall_s = t.elapsed().as_secs_f64();
        check(c, &h, args.connections)?;
        if c.refused {
            failures = h.error_summary();
        }
        let profile = take_dump(dumps, &hint, keep)?;
        let ir = counted(&profile);
        eprintln!(
            "rep {} {:>17}: {:>10.0} Ir/connection ({:.1} s, {} connections)",
            rep + 1,
            c.key(),
            ir as f64 / args.connections as f64,
            wall_s,
            args.connections
        );
        windows.push(Window {
            config: ci,
            conns: args.connections,
            wall_s,
            ir,
            profile,
        });
    }
    // Idle last: no connection at all, what the timers execute.
    std::thread::sleep(SETTLE);
    callgrind_control(pid, &["--zero"])?;
    let t = Instant::now();
    std::thread::sleep(if args.smoke {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(2)
    });
    let hint = format!("tls-idle-{}", c.key());
    callgrind_control(pid, &[&format!("--dump={hint}")])?;
    let idle = take_dump(dumps, &hint, keep)?;
    let idle_per_s = counted(&idle) as f64 / t.elapsed().as_secs_f64();

    py.release()?;
    drop(py);
    drop(ts);
    Ok((idle_per_s, failures, windows))
}
