//! The flood: one address (the flooder, `flooder.rs`) opening ~2,000 TLS
//! connections a second while a second address makes real handshakes, one
//! every 50 ms; the light client's handshake times unloaded and under the
//! flood, traffic_server's CPU, and the rest of the machine's load.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::args::Args;
use super::client::{Hellos, Plan, Py};
use super::flooder::{flood, Flood, FloodResult};
use super::setup::{builder, yaml_flood, Plugin, FLOODER, LIGHT, SNI};
use crate::report::grouped as int;
use crate::stats::percentile;
use crate::sys;

/// A flood run during which the rest of the machine used more cores than
/// this (in either light-client window) is run again, at most
/// [`FLOOD_ATTEMPTS`] times in all.
pub const OTHER_LOAD_LIMIT: f64 = 0.25;
const FLOOD_ATTEMPTS: usize = 3;

/// One configuration's flood measurement.
#[derive(Clone, Debug)]
pub struct FloodRun {
    pub unloaded: Window,
    pub loaded: Window,
    pub flood: FloodResult,
    /// Runs made to get this one (see `OTHER_LOAD_LIMIT`).
    pub attempts: usize,
}

impl FloodRun {
    /// The other processes' load, niced ones too (they still delay a
    /// waking ATS thread), in the more disturbed of the two windows.
    pub fn other_cores(&self) -> f64 {
        let (u, l) = (&self.unloaded, &self.loaded);
        u.cores(u.other_s + u.niced_s)
            .max(l.cores(l.other_s + l.niced_s))
    }
}

/// One run of the light client, and the CPU spent meanwhile.
#[derive(Clone, Debug)]
pub struct Window {
    pub hellos: Hellos,
    pub wall_s: f64,
    /// traffic_server's CPU seconds, and the system (kernel) part of them.
    pub ats_s: f64,
    pub ats_sys_s: f64,
    /// CPU seconds of every other process on the machine (not
    /// traffic_server, the bench with its flooder, or the light client),
    /// but for niced processes' user time: the shared machine's other load.
    pub other_s: f64,
    /// User CPU seconds of niced processes (all others': background jobs
    /// that take what is idle, but still delay a waking ATS thread).
    pub niced_s: f64,
}

impl Window {
    pub fn cores(&self, cpu_s: f64) -> f64 {
        cpu_s / self.wall_s.max(1e-9)
    }
}

/// The light client's plan, unloaded and under the flood.
#[derive(Clone, Copy, Debug)]
pub struct Light<'a> {
    pub sni: &'a str,
    pub source: &'a str,
    pub n: u64,
    pub interval_ms: u64,
}

/// /proc/stat's first line: busy seconds of all CPUs (user, system, irq,
/// softirq, steal) and the user time of niced processes (nice).
fn machine_cpu() -> Result<(f64, f64), String> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let v: Vec<f64> = text
        .lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if v.len() < 8 {
        return Err("unexpected format of /proc/stat".into());
    }
    let tck = sys::clock_ticks_per_second() as f64;
    Ok(((v[0] + v[2] + v[5] + v[6] + v[7]) / tck, v[1] / tck))
}

/// stime of a process (field 15 of /proc/PID/stat), in seconds.
fn system_seconds(pid: u32) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // Fields counted after the command name's last ')': state is field 3.
    text.rfind(')')
        .and_then(|i| text[i + 1..].split_whitespace().nth(12))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|t| t / sys::clock_ticks_per_second() as f64)
        .ok_or_else(|| format!("unexpected format of {path}"))
}

/// CPU seconds so far: the machine's (normal priority, niced),
/// traffic_server's (all, system), and ours (the bench with its flooder
/// thread, and the light client).
fn cpu_now(ats: u32, py: u32) -> Result<[f64; 5], String> {
    let (busy, niced) = machine_cpu()?;
    Ok([
        busy,
        niced,
        sys::cpu_seconds(ats)?,
        system_seconds(ats)?,
        sys::cpu_seconds(std::process::id())? + sys::cpu_seconds(py)?,
    ])
}

fn light_window(py: &mut Py, pid: u32, port: u16, l: Light) -> Result<Window, String> {
    let c0 = cpu_now(pid, py.pid())?;
    let t0 = Instant::now();
    let h = py.hellos(Plan {
        port,
        sni: l.sni,
        source: l.source,
        n: l.n,
        interval_ms: l.interval_ms,
        timeout_s: 10,
    })?;
    let wall_s = t0.elapsed().as_secs_f64();
    let c1 = cpu_now(pid, py.pid())?;
    if h.ok != l.n {
        return Err(format!(
            "the light client from {} got {} of {} handshakes through: {}",
            l.source,
            h.ok,
            l.n,
            h.error_summary()
        ));
    }
    let ats_s = c1[2] - c0[2];
    Ok(Window {
        hellos: h,
        wall_s,
        ats_s,
        ats_sys_s: c1[3] - c0[3],
        other_s: ((c1[0] - c0[0]) - ats_s - (c1[4] - c0[4])).max(0.0),
        niced_s: c1[1] - c0[1],
    })
}

/// Unloaded, then under the flood (which starts half a second before the
/// light client and runs a second past it).
pub fn run(
    py: &mut Py,
    pid: u32,
    port: u16,
    light: Light,
    flood_plan: &Flood,
) -> Result<FloodRun, String> {
    let unloaded = light_window(py, pid, port, light)?;
    let plan = flood_plan.clone();
    let flooder = std::thread::spawn(move || flood(&plan));
    std::thread::sleep(Duration::from_millis(500));
    let loaded = light_window(py, pid, port, light);
    let flood = flooder
        .join()
        .map_err(|_| "the flooder thread panicked".to_owned())??;
    Ok(FloodRun {
        unloaded,
        loaded: loaded?,
        flood,
        attempts: 1,
    })
}

/// One configuration's traffic_server: warm-up, then the flood run (again
/// while the machine is too busy, see [`OTHER_LOAD_LIMIT`]).
pub fn measure(args: &Args, plugin: Plugin) -> Result<FloodRun, String> {
    let root = tempfile::Builder::new()
        .prefix("ats-bench-tls-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let ts = builder(plugin, &yaml_flood(), root.path())
        .start()
        .map_err(|e| format!("traffic_server ({}) did not start: {e:?}", plugin.label()))?;
    let pid = ts.server_pid().ok_or("cannot find traffic_server's pid")?;
    let port = ts.tls_port();
    eprintln!(
        "flood, {}: traffic_server pid {pid}, TLS port {port}",
        plugin.label()
    );
    let mut py = Py::spawn()?;
    let hello = py.client_hello(SNI)?;
    let light = Light {
        sni: SNI,
        source: LIGHT,
        n: args.light,
        interval_ms: 50,
    };
    // Warm-up: the first handshakes of a fresh server are slower, and the
    // first flood allocates what the next one reuses.
    let warm = Light { n: 20, ..light };
    let warm_flood = if args.smoke { 0.5 } else { 2.0 };
    run(
        &mut py,
        pid,
        port,
        warm,
        &Flood {
            port,
            source: FLOODER,
            per_second: args.flood_rate,
            duration: Duration::from_secs_f64(warm_flood),
            hello: hello.clone(),
        },
    )?;
    let seconds = args.light as f64 * 0.05 + 1.5;
    let plan = Flood {
        port,
        source: FLOODER,
        per_second: args.flood_rate,
        duration: Duration::from_secs_f64(seconds),
        hello,
    };
    // On 2 shared cores a build beside the bench shows in the light
    // client's p99: up to 3 attempts, the least disturbed one kept.
    let mut best: Option<FloodRun> = None;
    let mut attempts = 0;
    while attempts < FLOOD_ATTEMPTS {
        attempts += 1;
        std::thread::sleep(Duration::from_millis(500));
        let r = run(&mut py, pid, port, light, &plan)?;
        let other = r.other_cores();
        eprintln!(
            "flood, {}: attempt {attempts}, other processes {other:.2} cores",
            plugin.label()
        );
        if best.as_ref().is_none_or(|b| other < b.other_cores()) {
            best = Some(r);
        }
        if other <= OTHER_LOAD_LIMIT || args.smoke {
            break;
        }
    }
    let mut res = best.ok_or("no flood run")?;
    res.attempts = attempts;
    let f = &res.flood;
    let (u, l) = (&res.unloaded, &res.loaded);
    let pct = |w: &Window, p| crate::stats::percentile(&w.hellos.us, p);
    eprintln!(
        "flood, {}: light p50/p99 unloaded {:.0}/{:.0} µs, flooded {:.0}/{:.0} µs; flood {:.0}/s \
         ({} answered, {} alerts, {} closed, {} timeouts, {} connect errors, {} skipped); \
         ATS {:.2}/{:.2} cores, other processes {:.2}/{:.2} cores (niced {:.2}/{:.2})",
        plugin.label(),
        pct(u, 50.0),
        pct(u, 99.0),
        pct(l, 50.0),
        pct(l, 99.0),
        f.rate(),
        f.answered,
        f.alerts,
        f.closed,
        f.timeouts,
        f.connect_errors,
        f.skipped,
        u.cores(u.ats_s),
        l.cores(l.ats_s),
        u.cores(u.other_s),
        l.cores(l.other_s),
        u.cores(u.niced_s),
        l.cores(l.niced_s),
    );
    // Not a test of the plugin, only that the setup measured what it says.
    if plugin == Plugin::None && f.answered == 0 {
        return Err(format!(
            "without a plugin the server answered none of {} flood connections",
            f.opened
        ));
    }
    if plugin == Plugin::Ours && f.answered > f.opened / 5 {
        return Err(format!(
            "the per-ip selector let {} of {} flood connections through",
            f.answered, f.opened
        ));
    }
    Ok(res)
}

fn ms(us: f64) -> String {
    if us < 10_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.1} ms", us / 1e3)
    }
}

/// The flood's part of the section.
pub fn section(args: &Args, floods: &[(Plugin, FloodRun)]) -> String {
    let mut s = String::from("### A flood from one address\n\n");
    let f0 = &floods[0].1.flood;
    let _ = writeln!(
        s,
        "Native traffic_server (no valgrind), one per configuration, selector `{SNI}` with \
         `per-ip: {{limit: 20, rate: 50}}` for ours. The **light client** (127.0.0.3, Python \
         `ssl`) makes {} real handshakes, one every 50 ms (each timed from connect to handshake \
         done, then closed): first unloaded, then while the **flooder** (127.0.0.2, a thread of \
         the bench) opens {} connections a second for {:.1} s (from half a second before the \
         light client to a second after it). The flooder writes a recorded TLS 1.3 \
         ClientHello on each connection, reads the server's first record (a ServerHello: \
         *answered*; an alert or a close: *refused*; *no answer* within 2 s; *not opened*: \
         connect() failed, or 2,000 of its connections were already waiting), then resets the \
         connection; it does no cryptography, so nearly all the CPU it makes the machine spend \
         is traffic_server's. **ATS CPU**: utime+stime of traffic_server from `/proc` over the \
         light client's window ÷ the window (cores); **per flood connection**: (flooded − \
         unloaded) ÷ the flood's rate, and its system (kernel) part. **Other processes**: the CPU the rest of this shared \
         machine used during the unloaded / flooded window (`/proc/stat` minus traffic_server, \
         the bench and the light client), at normal priority and, in brackets, niced \
         (background jobs that take what is idle, but still delay a waking ATS thread); on 2 \
         cores a few tenths of a core there show in the light client's p99, so a flood run \
         with more than {} cores of both together in either window is repeated (at most 3 \
         runs, the least disturbed kept). Goal (issue 29): the light client's p99 under the flood within 2× of unloaded.\n",
        args.light,
        int(args.flood_rate, false),
        f0.seconds,
        OTHER_LOAD_LIMIT,
    );
    let _ = writeln!(
        s,
        "| configuration | light p50 unloaded | p99 unloaded | p50 flooded | p99 flooded | p99 flooded ÷ unloaded | ATS CPU unloaded | ATS CPU flooded | ATS CPU per flood connection | flood achieved | answered | refused | no answer / not opened | flooder CPU | other processes |"
    );
    let _ = writeln!(
        s,
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    );
    for (p, r) in floods {
        let (u, l) = (&r.unloaded, &r.loaded);
        let (u50, u99) = (
            percentile(&u.hellos.us, 50.0),
            percentile(&u.hellos.us, 99.0),
        );
        let (l50, l99) = (
            percentile(&l.hellos.us, 50.0),
            percentile(&l.hellos.us, 99.0),
        );
        let f = &r.flood;
        let label = match p {
            Plugin::Ours => "our rate_limit.so, `per-ip: {limit: 20, rate: 50}`",
            _ => p.label(),
        };
        let ratio = l99 / u99;
        let (cores_u, cores_l) = (u.cores(u.ats_s), l.cores(l.ats_s));
        // The flood's share of ATS's CPU, per connection it opened.
        let per_conn = |cu: f64, cl: f64| (cl - cu) / f.rate().max(1e-9) * 1e6;
        let per_conn_us = per_conn(cores_u, cores_l);
        let per_conn_sys_us = per_conn(u.cores(u.ats_sys_s), l.cores(l.ats_sys_s));
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} | **{ratio:.2}×** ({}) | {cores_u:.2} | {cores_l:.2} | {per_conn_us:.0} µs ({per_conn_sys_us:.0} µs kernel) | {}/s | {} | {} | {} / {} | {:.2} cores | {:.2} / {:.2} cores (niced {:.2} / {:.2}){} |",
            ms(u50),
            ms(u99),
            ms(l50),
            ms(l99),
            if ratio <= 2.0 { "met" } else { "not met" },
            int(f.rate(), false),
            int(f.answered as f64, false),
            int((f.alerts + f.closed) as f64, false),
            int(f.timeouts as f64, false),
            int((f.connect_errors + f.skipped) as f64, false),
            f.cpu_s / f.seconds.max(1e-9),
            u.cores(u.other_s),
            l.cores(l.other_s),
            u.cores(u.niced_s),
            l.cores(l.niced_s),
            match r.attempts {
                1 => String::new(),
                n => format!(" (least disturbed of {n} runs)"),
            },
        );
    }
    s + "\n"
}
