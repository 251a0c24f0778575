//! ats-bench: what our plugins cost per request on a real traffic_server,
//! side by side with no plugin and with upstream's C++ rate_limit.so, the
//! queue-resume latency of both rate limiters, the micro-benchmark
//! table from criterion's results, and (`plots`) the adaptive limit's
//! convergence, simulated. Writes the markdown sections of
//! BENCHMARKS.md. Not a test: it asserts no timing, only that the setup
//! does what the measurement needs (hits are hits, misses reach the origin).
//!
//! Usually run through `ci/bench.sh`, which installs wrk and nginx, runs
//! the criterion benches and then this.

#![forbid(unsafe_code)]

mod attribution;
mod callgrind;
mod check;
mod icount;
mod icount_cli;
mod icount_report;
mod load;
mod load_report;
mod micro;
mod micro_icount;
mod micro_icount_report;
mod nginx;
mod plots;
mod queue;
mod records;
mod report;
mod sections;
mod stats;
mod sys;
mod tls;
mod variants;
mod wrk;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ats_tests::{Origin, TrafficServer};

use crate::queue::{Plan, QueueVariant};
use crate::records::{ATS_RECORDS, ATS_SETTINGS};
use crate::report::Context;
use crate::variants::{load_variants, pparams, upstream};

/// Both rate_limit.so in the queue-resume measurement.
const RL_QUEUE_OPTIONS: &[&str] = &["--limit=1", "--queue=100", "--header=X-Queue-Delay"];

const USAGE: &str = "\
usage: ats-bench [--smoke] [--out FILE] [options]
       ats-bench icount|micro-icount|tls [--help]   (instruction counts; TLS connections)
       ats-bench check-sections [FILE]              (FILE's generated sections against what they cite)
       ats-bench plots --out-dir DIR [--out FILE] | --check   (--limit=auto's convergence, simulated)

  --smoke              a few seconds per part, every configuration once; numbers
                       are meaningless and FILE is not written
  --out FILE           update the generated sections of FILE (e.g. BENCHMARKS.md);
                       the markdown is printed to stdout in any case
  --rounds N           measured rounds per workload (default 30: with 6 configurations
                       each runs in each position of the rotating order 5 times; smoke 1)
  --duration SECS      seconds per wrk run (default 3: many short rounds cancel the
                       drift of a shared machine better than a few long ones; smoke 1)
  --warmup SECS        seconds per run of the warm-up round, 0 = none (default 3; smoke 0)
  --connections N      wrk connections (default 32)
  --queue-trials N     queue-resume trials per plugin (default 100; smoke 2)
  --criterion DIR      criterion results to tabulate (default <workspace>/target/criterion)
  --pin                pin traffic_server to CPU 0, wrk and nginx to CPU 1 (off by
                       default: on 2 CPUs it halves what ATS gets and did not reduce noise)
  --no-load, --no-queue, --no-micro
                       skip a part (its section in FILE is left as it is)
";

#[derive(Clone, Debug)]
struct Args {
    smoke: bool,
    out: Option<PathBuf>,
    rounds: usize,
    duration: u64,
    warmup: u64,
    connections: u32,
    queue_trials: usize,
    criterion: PathBuf,
    load: bool,
    queue: bool,
    micro: bool,
    pin: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let smoke = argv.iter().any(|a| a == "--smoke");
    let mut a = Args {
        smoke,
        out: None,
        rounds: if smoke { 1 } else { 30 },
        duration: if smoke { 1 } else { 3 },
        warmup: if smoke { 0 } else { 3 },
        connections: 32,
        queue_trials: if smoke { 2 } else { 100 },
        criterion: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion"),
        load: true,
        queue: true,
        micro: true,
        pin: false,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        fn num<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{name}: '{v}' is not a valid number"))
        }
        match arg.as_str() {
            "--smoke" => {}
            "--out" => a.out = Some(PathBuf::from(value(arg)?)),
            "--rounds" => a.rounds = num(arg, value(arg)?)?,
            "--duration" => a.duration = num(arg, value(arg)?)?,
            "--warmup" => a.warmup = num(arg, value(arg)?)?,
            "--connections" => a.connections = num(arg, value(arg)?)?,
            "--queue-trials" => a.queue_trials = num(arg, value(arg)?)?,
            "--criterion" => a.criterion = PathBuf::from(value(arg)?),
            "--no-load" => a.load = false,
            "--no-queue" => a.queue = false,
            "--no-micro" => a.micro = false,
            "--pin" => a.pin = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.smoke && a.out.is_some() {
        return Err("--smoke numbers are meaningless: not writing them to --out".into());
    }
    if a.rounds == 0 || a.duration == 0 || a.connections == 0 || a.queue_trials == 0 {
        return Err("--rounds, --duration, --connections and --queue-trials must be > 0".into());
    }
    Ok(a)
}

const QUEUE_VARIANTS: [QueueVariant; 3] = [
    QueueVariant {
        label: "upstream rate_limit.so (C++)",
        host: "q-upstream.bench",
        sequential: false,
    },
    QueueVariant {
        label: "our rate_limit.so",
        host: "q-ours.bench",
        sequential: false,
    },
    QueueVariant {
        label: "reference: no plugin, client sends each next request on the previous response",
        host: "q-none.bench",
        sequential: true,
    },
];

fn run(args: &Args) -> Result<(), String> {
    let machine = sys::Machine::probe();
    let ctx = Context {
        machine: &machine,
        command: crate::report::command(),
    };
    let mut sections: Vec<(&str, String)> = Vec::new();

    if args.load || args.queue {
        let upstream = upstream();
        if !Path::new(&upstream).is_file() {
            return Err(format!(
                "{upstream} is missing: install trafficserver-experimental-plugins (ci/bench.sh does)"
            ));
        }
        // Builds the plugins for this binary's profile first (release under ci/bench.sh).
        let ours_rl = ats_tests::plugin("rate_limit");
        let ours_throttle = ats_tests::plugin("throttle");
        let ours_ip = ats_tests::plugin("ip_throttle");
        let variants = load_variants(&ours_rl, &ours_throttle, &ours_ip);
        let nginx = if args.load {
            Some(nginx::Nginx::start()?)
        } else {
            None
        };
        let origin = args.queue.then(Origin::start);
        let mut remap = String::new();
        if let Some(n) = &nginx {
            for v in &variants {
                remap += &v.remap_line(&n.url());
            }
            remap += &format!(
                "map http://{}/ {}/ @plugin={ours_throttle} @pparam=max:0\n",
                load::THROTTLE_CHECK_HOST,
                n.url()
            );
        }
        if let Some(o) = &origin {
            for (q, plugin) in QUEUE_VARIANTS
                .iter()
                .zip([Some(&upstream), Some(&ours_rl), None])
            {
                let plugin = plugin.map_or(String::new(), |p| {
                    format!("@plugin={p}{}", pparams(RL_QUEUE_OPTIONS))
                });
                remap += &format!("map http://{}/ {}/ {plugin}\n", q.host, o.url());
            }
        }
        let mut builder = TrafficServer::builder().remap(remap.clone());
        for (k, v) in ATS_RECORDS {
            builder = builder.record(k, v);
        }
        let ts = builder
            .start()
            .map_err(|e| format!("traffic_server did not start: {e:?}"))?;
        let pid = ts.server_pid().ok_or("cannot find traffic_server's pid")?;
        eprintln!(
            "traffic_server pid {pid}, port {}; remap.config:\n{remap}",
            ts.port()
        );

        if let Some(n) = &nginx {
            load::verify(ts.port(), n, &variants)?;
            eprintln!(
                "verified: /hit is served from cache, /miss?v=1 reaches nginx once per \
                 request, throttle.so counts /miss?v=1"
            );
            if args.pin {
                sys::pin(pid, "0")?;
                sys::pin(n.pid(), "1")?;
            }
            let load = wrk::Load {
                threads: 1,
                connections: args.connections,
                duration: Duration::from_secs(args.duration),
                cpu: args.pin.then_some(1),
            };
            let origin_alone = load::origin_capacity(n, &load)?;
            let mut res = load::run(
                ts.port(),
                pid,
                n,
                &variants,
                load,
                Duration::from_secs(args.warmup),
                args.rounds,
            )?;
            res.origin = origin_alone;
            sections.push((
                "load",
                load_report::load_section(&ctx, &variants, &res, ATS_SETTINGS),
            ));
        }
        if let Some(o) = &origin {
            let plan = Plan {
                trials: args.queue_trials,
                clients: 4,
                origin_delay_ms: 50,
            };
            let results = queue::run(ts.port(), o, &QUEUE_VARIANTS, plan);
            sections.push((
                "queue",
                queue::queue_section(&ctx, &plan, &RL_QUEUE_OPTIONS.join(" "), &results),
            ));
        }
    }

    if args.micro {
        match micro::read(&args.criterion) {
            Ok(est) if !est.is_empty() => sections.push((
                "micro",
                micro::micro_section(&ctx, Path::new("target/criterion"), &est),
            )),
            Ok(_) => eprintln!(
                "no criterion results under {}: micro-benchmark section skipped \
                 (run the benches first, or use ci/bench.sh)",
                args.criterion.display()
            ),
            Err(e) => return Err(format!("reading criterion results: {e}")),
        }
    }

    for (_, body) in &sections {
        println!("{body}");
    }
    if let Some(out) = &args.out {
        crate::sections::update(out, &sections)?;
        eprintln!("updated {}", out.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        Some("icount") => return icount_cli::main(&argv[1..]),
        Some("micro-icount") => return micro_icount::main(&argv[1..]),
        Some("tls") => return tls::main(&argv[1..]),
        Some("check-sections") => return check::main(&argv[1..]),
        Some("plots") => return plots::main(&argv[1..]),
        _ => {}
    }
    let args = match report::args_or_exit("ats-bench", USAGE, parse_args(&argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ats-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse_args(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_overrides() {
        let full = args("").expect("no arguments is the full run");
        assert_eq!((full.rounds, full.duration, full.warmup), (30, 3, 3));
        let smoke = args("--smoke --rounds 2").expect("valid");
        assert!(smoke.smoke);
        assert_eq!((smoke.rounds, smoke.duration, smoke.warmup), (2, 1, 0));
        assert!(args("--smoke --out BENCHMARKS.md").is_err());
        assert!(args("--rounds x").is_err());
        assert!(args("--rounds").is_err());
        assert!(args("--bogus").is_err());
        assert!(!args("--no-micro").expect("valid").micro);
    }
}
