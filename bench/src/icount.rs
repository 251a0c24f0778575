//! `ats-bench icount`: instructions per request of traffic_server, counted
//! by callgrind, for each configuration of the load bench and both
//! workloads. Deterministic where the load bench's CPU time is not (±5 %
//! between runs on this shared VM): an instruction count does not depend on
//! what else the machine runs.
//!
//! How a window is measured: traffic_server runs under
//! `valgrind --tool=callgrind --instr-atstart=no` (start-up uninstrumented,
//! ~10x faster), instrumentation is switched on once it serves, and per
//! configuration one client on one keep-alive connection sends a warm-up,
//! then `callgrind_control --zero`, exactly N requests one after the other
//! (each checked: 200 and nginx's body), a short settle, and
//! `callgrind_control --dump=<hint>`. Zero/dump from outside rather than
//! `--toggle-collect` on some ATS function: the count then includes all of
//! traffic_server's work (net I/O, the state machine, the cache, other
//! threads), which is what a plugin competes with, and ATS itself needs no
//! client requests compiled in. One request at a time on one connection
//! makes each request take the same path (no batching of epoll events that
//! depends on timing). What is not per request (timers, the per-second
//! stats sync) is counted too; the idle window measures it.

use std::path::Path;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::TrafficServer;

use crate::callgrind::{callgrind_control, take_dump, Profile};
use crate::icount_cli::Args;
use crate::load::{Variant, Workload, WORKLOADS};
use crate::nginx::{Nginx, BODY};

/// One measured window.
#[derive(Debug)]
pub struct Window {
    pub variant: usize,
    pub workload: Workload,
    pub rep: usize,
    pub requests: u64,
    pub wall_s: f64,
    /// Instructions counted: the whole process minus the AIO threads.
    pub ir: u64,
    pub profile: Profile,
}

/// The cache's AIO threads: they wake on a timer and do nothing for these
/// workloads (RAM-cache hits, uncached proxying), ~300 k instructions a
/// second that are not per request. Their loop is entered at start-up and
/// never left, so its inclusive cost is all they execute; it is left out.
const AIO_LOOP: &str = "AIOThreadInfo::start(";

pub(crate) fn counted(p: &Profile) -> u64 {
    p.total
        .saturating_sub(p.inclusive(|n| n.starts_with(AIO_LOOP)))
}

pub struct Results {
    pub variants: Vec<Variant>,
    /// ELF object of each variant's plugin ("" for none), as callgrind names it.
    pub objects: Vec<String>,
    pub windows: Vec<Window>,
    /// Instructions per second with no request at all (timers, stats sync).
    pub idle_per_s: f64,
    pub args: Args,
}

/// The measured requests all carry this Host, and each configuration is a
/// rule for a path prefix of it (`/v00/`, `/v01/`, ...): one remap host
/// entry for all, and path prefixes of one length, so that the lookup costs
/// the same for every rule. Rules on hosts of their own differed by up to
/// ~160 instructions per request without any plugin (the host hash table's
/// collisions: `memcmp` in `std::unordered_map::find`). The host-based
/// rules of the load bench stay in remap.config for `load::verify`.
const HOST: &str = "icount.bench";

fn prefix(vi: usize) -> String {
    format!("/v{vi:02}/")
}

/// Periodic work that is not per request, pushed out of the measured
/// windows: the records sync to traffic_manager (even without one it
/// marshals every record: ~40 M instructions each time, by default every
/// few seconds), config update polling and the raw-stat sync.
pub(crate) const QUIET: &[(&str, &str)] = &[
    ("proxy.config.remote_sync_interval_ms", "INT 3600000"),
    ("proxy.config.config_update_interval_ms", "INT 3600000"),
    ("proxy.config.raw_stat_sync_interval_ms", "INT 3600000"),
];

/// After the last response, ATS still closes the transaction (TXN_CLOSE):
/// give it this long before dumping.
pub const SETTLE: Duration = Duration::from_millis(200);

#[allow(clippy::too_many_arguments)]
fn window(
    ts: &TrafficServer,
    pid: u32,
    nginx: &Nginx,
    dumps: &Path,
    vi: usize,
    w: Workload,
    args: &Args,
    hint: &str,
) -> Result<(Profile, f64), String> {
    let mut conn = Conn::open(ts.port()).map_err(|e| format!("connect: {e}"))?;
    let path = format!("{}{}", prefix(vi), &w.path()[1..]);
    let mut get = |n: u64| -> Result<(), String> {
        for _ in 0..n {
            let r = conn
                .get(HOST, &path, &[])
                .map_err(|e| format!("GET {path} via {HOST}: {e}"))?;
            if r.status != 200 || r.body != BODY.as_bytes() {
                return Err(format!(
                    "GET {path} via {HOST}: HTTP {} instead of nginx's body",
                    r.status
                ));
            }
        }
        Ok(())
    };
    get(args.warmup)?;
    std::thread::sleep(SETTLE);
    let origin_before = nginx.requests()?;
    callgrind_control(pid, &["--zero"])?;
    let t0 = Instant::now();
    get(args.requests)?;
    std::thread::sleep(SETTLE);
    callgrind_control(pid, &[&format!("--dump={hint}")])?;
    let wall_s = t0.elapsed().as_secs_f64();
    // Minus the status request itself.
    let origin = nginx.requests()? - origin_before - 1;
    let want = match w {
        Workload::Hit => 0,
        Workload::Proxied => args.requests,
    };
    if origin != want {
        return Err(format!(
            "{path} via {HOST}: nginx saw {origin} requests instead of {want}"
        ));
    }
    drop(conn);
    let profile = take_dump(dumps, hint, args.dumps.is_some())?;
    Ok((profile, wall_s))
}

pub fn run(args: &Args, variants: Vec<Variant>, objects: Vec<String>) -> Result<Results, String> {
    if variants.len() > 100 {
        return Err("at most 100 configurations (path prefixes /v00/ to /v99/)".into());
    }
    let nginx = Nginx::start()?;
    let tmp = tempfile::Builder::new()
        .prefix("ats-bench-icount-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dumps = crate::callgrind::dump_dir(args.dumps.as_deref(), tmp.path())?;
    let out_file = format!("--callgrind-out-file={}/callgrind.out", dumps.display());
    let mut remap: String = variants
        .iter()
        .map(|v| v.remap_line(&nginx.url()))
        .collect();
    for (vi, v) in variants.iter().enumerate() {
        remap += &format!(
            "map http://{HOST}{} {}/ {}\n",
            prefix(vi),
            nginx.url(),
            v.plugin
        );
    }
    // For load::verify's check that throttle.so counts the proxied requests.
    remap += &format!(
        "map http://{}/ {}/ @plugin={} @pparam=max:0\n",
        crate::load::THROTTLE_CHECK_HOST,
        nginx.url(),
        ats_tests::plugin("throttle")
    );
    let mut builder = TrafficServer::builder()
        .remap(remap.clone())
        .wrapper(&[
            "nice",
            "-n",
            "10",
            "valgrind",
            "--tool=callgrind",
            &out_file,
        ])
        .start_timeout(Duration::from_secs(600));
    for (k, v) in crate::records::ATS_RECORDS {
        builder = builder.record(k, v);
    }
    // Load plugins from where they are, not from per-load copies: callgrind
    // then names each plugin's object by its own path.
    builder = builder.record("proxy.config.plugin.dynamic_reload_mode", "INT 0");
    for (k, v) in QUIET {
        builder = builder.record(k, v);
    }
    eprintln!("starting traffic_server under callgrind (uninstrumented until it serves)...");
    let ts = builder
        .start()
        .map_err(|e| format!("traffic_server did not start under valgrind: {e:?}"))?;
    let pid = ts.server_pid().ok_or("cannot find traffic_server's pid")?;
    eprintln!(
        "traffic_server pid {pid}, port {}; remap.config:\n{remap}",
        ts.port()
    );
    crate::load::verify(ts.port(), &nginx, &variants)?;

    // Idle: what traffic_server executes per second with no requests.
    callgrind_control(pid, &["--zero"])?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    callgrind_control(pid, &["--dump=idle"])?;
    let idle = take_dump(&dumps, "idle", args.dumps.is_some())?;
    let idle_per_s = counted(&idle) as f64 / t0.elapsed().as_secs_f64();
    eprintln!(
        "idle: {idle_per_s:.0} instructions/s ({:.0}/s with the AIO threads)",
        idle.total as f64 / t0.elapsed().as_secs_f64()
    );

    let mut windows = Vec::new();
    for rep in 0..args.reps {
        for &w in &WORKLOADS {
            // Rotate the order per repetition, as the load bench does.
            for i in 0..variants.len() {
                let vi = (i + rep) % variants.len();
                let v = &variants[vi];
                let hint = format!("icount-{}-{}-{rep}", v.key, w.key());
                let (profile, wall_s) = window(&ts, pid, &nginx, &dumps, vi, w, args, &hint)?;
                eprintln!(
                    "rep {} {:>7} {:>9}: {:>10.0} Ir/request  ({:.1} s, {} requests)",
                    rep + 1,
                    w.key(),
                    v.key,
                    counted(&profile) as f64 / args.requests as f64,
                    wall_s,
                    args.requests
                );
                windows.push(Window {
                    variant: vi,
                    workload: w,
                    rep,
                    requests: args.requests,
                    wall_s,
                    ir: counted(&profile),
                    profile,
                });
            }
        }
    }
    Ok(Results {
        variants,
        objects,
        windows,
        idle_per_s,
        args: args.clone(),
    })
}
