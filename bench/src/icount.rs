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

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::TrafficServer;

use crate::callgrind::{callgrind_control, take_dump, Profile};
use crate::load::{Variant, Workload, WORKLOADS};
use crate::nginx::{Nginx, BODY};
use crate::report::Context;

pub const USAGE: &str = "\
usage: ats-bench icount [--requests N] [--warmup N] [--reps N] [--out FILE] [--dumps DIR]

  --requests N   requests per measured window (default 2000)
  --warmup N     requests on the same connection before the counters are zeroed (default 200)
  --reps N       repetitions of every configuration and workload (default 3)
  --out FILE     update the generated icount section of FILE (e.g. BENCHMARKS.md)
  --dumps DIR    keep callgrind's dump files there (default: a temp dir, removed)
";

#[derive(Clone, Debug)]
pub struct Args {
    pub requests: u64,
    pub warmup: u64,
    pub reps: usize,
    pub out: Option<PathBuf>,
    pub dumps: Option<PathBuf>,
}

pub fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        requests: 2000,
        warmup: 200,
        reps: 3,
        out: None,
        dumps: None,
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
            "--requests" => a.requests = num(value()?)?,
            "--warmup" => a.warmup = num(value()?)?,
            "--reps" => a.reps = num(value()?)? as usize,
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--dumps" => a.dumps = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.requests == 0 || a.reps == 0 {
        return Err("--requests and --reps must be > 0".into());
    }
    Ok(a)
}

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

fn counted(p: &Profile) -> u64 {
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

/// Our rule with only a rate (never reached): admitted requests leave no
/// state and no hook behind, the cheapest a remap plugin can be.
pub const RATE_ONLY_OPTIONS: &[&str] = &["--rate=1000000", "--queue=1000"];
/// Our keyed rule: the same limits, per client address.
pub const KEYED_OPTIONS: &[&str] = &["--limit=1000000", "--queue=1000", "--key=ip"];
/// ip_throttle.so's options once the plugin exists (measured only if its
/// `.so` is built next to ours).
pub const IP_THROTTLE_OPTIONS: &[&str] = &[];

/// The measured requests all carry this Host, and each configuration is a
/// rule for a path prefix of it (`/v0/`, `/v1/`, ...): one remap host
/// entry for all, and path prefixes of one length, so that the lookup costs
/// the same for every rule. Rules on hosts of their own differed by up to
/// ~160 instructions per request without any plugin (the host hash table's
/// collisions: `memcmp` in `std::unordered_map::find`). The host-based
/// rules of the load bench stay in remap.config for `load::verify`.
const HOST: &str = "icount.bench";

fn prefix(vi: usize) -> String {
    format!("/v{vi}/")
}

/// Periodic work that is not per request, pushed out of the measured
/// windows: the records sync to traffic_manager (even without one it
/// marshals every record: ~40 M instructions each time, by default every
/// few seconds), config update polling and the raw-stat sync.
const QUIET: &[(&str, &str)] = &[
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
    if variants.len() > 10 {
        return Err("at most 10 configurations (path prefixes /v0/ to /v9/)".into());
    }
    let nginx = Nginx::start()?;
    let tmp = tempfile::Builder::new()
        .prefix("ats-bench-icount-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dumps = match &args.dumps {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.canonicalize()
                .map_err(|e| format!("{}: {e}", d.display()))?
        }
        None => tmp.path().to_path_buf(),
    };
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
    if let Some(t) = variants.iter().find(|v| v.key == "throttle") {
        let so = t.plugin.split_whitespace().next().unwrap_or_default();
        remap += &format!(
            "map http://{}/ {}/ {so} @pparam=max:0\n",
            crate::load::THROTTLE_CHECK_HOST,
            nginx.url()
        );
    }
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
    for (k, v) in crate::ATS_RECORDS {
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

/// The configurations of `ats-bench icount`: the load bench's, plus a keyed
/// rule of ours and, once it is built, ip_throttle.so.
fn variants(ours_rl: &str, ours_throttle: &str) -> Vec<Variant> {
    let mut v = crate::load_variants(ours_rl, ours_throttle);
    let control = v.pop().expect("the load bench ends with its A/A control");
    v.insert(
        3,
        Variant {
            key: "keyed",
            label: "our rate_limit.so, keyed (`--key=ip`)",
            host: "keyed.bench",
            plugin: format!("@plugin={ours_rl}{}", crate::pparams(KEYED_OPTIONS)),
        },
    );
    v.insert(
        3,
        Variant {
            key: "rate-only",
            label: "our rate_limit.so, rate only (`--rate`)",
            host: "rate-only.bench",
            plugin: format!("@plugin={ours_rl}{}", crate::pparams(RATE_ONLY_OPTIONS)),
        },
    );
    let ip_throttle = Path::new(ours_rl).with_file_name("ip_throttle.so");
    if ip_throttle.is_file() {
        v.push(Variant {
            key: "ip_throttle",
            label: "our ip_throttle.so",
            host: "ip-throttle.bench",
            plugin: format!(
                "@plugin={}{}",
                ip_throttle.display(),
                crate::pparams(IP_THROTTLE_OPTIONS)
            ),
        });
    }
    v.push(control);
    v
}

pub fn main(argv: &[String]) -> ExitCode {
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            print!("{}", USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ats-bench icount: {e}\n\n{}", USAGE);
            return ExitCode::from(2);
        }
    };
    let ours_rl = ats_tests::plugin("rate_limit");
    let ours_throttle = ats_tests::plugin("throttle");
    let variants = variants(&ours_rl, &ours_throttle);
    let objects = variants
        .iter()
        .map(|v| {
            v.plugin
                .strip_prefix("@plugin=")
                .and_then(|p| p.split_whitespace().next())
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    match run(&args, variants, objects) {
        Ok(res) => {
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
            let body = crate::icount_report::section(&ctx, &res);
            println!("{body}");
            if let Some(out) = &args.out {
                if let Err(e) = crate::report::update(out, &[("icount", body)]) {
                    eprintln!("ats-bench icount: {e}");
                    return ExitCode::FAILURE;
                }
                eprintln!("updated {}", out.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ats-bench icount: {e}");
            ExitCode::FAILURE
        }
    }
}
