//! `ats-bench icount`'s command line: options, the configurations it
//! measures (the load bench's, a learned-limit, a rate-only, a keyed and a
//! keyed-rate rule of ours, any `--plugin` given), and the report.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::icount::run;
use crate::load::Variant;
use crate::report::Context;

pub const USAGE: &str = "\
usage: ats-bench icount [--requests N] [--warmup N] [--reps N] [--out FILE] [--dumps DIR]

  --requests N   requests per measured window (default 2000)
  --warmup N     requests on the same connection before the counters are zeroed (default 200)
  --reps N       repetitions of every configuration and workload (default 3)
  --out FILE     update the generated icount section of FILE (e.g. BENCHMARKS.md)
  --dumps DIR    keep callgrind's dump files there (default: a temp dir, removed)
  --only K,K,..  measure only these configurations (always also `none`, `floor`
                 and every --plugin): upstream, ours, auto, rate-only, keyed-rate, keyed,
                 throttle, ip_throttle, control
  --plugin 'KEY=/path/to/plugin.so [--opt ...]'
                 one more configuration (repeatable), e.g. a plugin built from
                 another branch: --plugin 'branch=/tmp/rate_limit.so --limit=1000000'
";

#[derive(Clone, Debug)]
pub struct Args {
    pub requests: u64,
    pub warmup: u64,
    pub reps: usize,
    pub out: Option<PathBuf>,
    pub dumps: Option<PathBuf>,
    pub only: Option<Vec<String>>,
    /// (key, .so path, options)
    pub plugins: Vec<(String, String, Vec<String>)>,
}

pub fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        requests: 2000,
        warmup: 200,
        reps: 3,
        out: None,
        dumps: None,
        only: None,
        plugins: Vec::new(),
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
            "--only" => a.only = Some(value()?.split(',').map(str::to_owned).collect()),
            "--plugin" => {
                let v = value()?;
                let (key, spec) = v
                    .split_once('=')
                    .filter(|(k, _)| !k.is_empty() && !k.contains(char::is_whitespace))
                    .ok_or_else(|| {
                        format!("--plugin: '{v}' is not KEY=/path/to/plugin.so [options]")
                    })?;
                let mut words = spec.split_whitespace().map(str::to_owned);
                let so = words
                    .next()
                    .ok_or_else(|| format!("--plugin: '{v}' names no .so"))?;
                a.plugins.push((key.to_owned(), so, words.collect()));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.requests == 0 || a.reps == 0 {
        return Err("--requests and --reps must be > 0".into());
    }
    Ok(a)
}

/// Our rule with a learned limit (issue 34): the load bench's `ours` with
/// `--limit=auto` for its fixed limit, to be read against it (the report
/// gives the difference). Its limit starts at 20 and is never reached by
/// one request at a time.
pub const AUTO_OPTIONS: &[&str] = &["--limit=auto", "--queue=1000"];
/// Our rule with only a rate (never reached): admitted requests leave no
/// state and no hook behind, the cheapest a remap plugin can be.
pub const RATE_ONLY_OPTIONS: &[&str] = &["--rate=1000000", "--queue=1000"];
/// Our keyed rule: the same limits, per client address.
pub const KEYED_OPTIONS: &[&str] = &["--limit=1000000", "--queue=1000", "--key=ip"];
/// Our keyed rate: a bucket per client address (issue 32's `--key=ip --rate`).
pub const KEYED_RATE_OPTIONS: &[&str] = &["--rate=1000000", "--queue=1000", "--key=ip"];

/// The floor (issue 32, `bench/floor/floor.c`): the least a remap
/// concurrency limiter must do, built for the line under test.
pub const FLOOR_SO: &str = env!("ATS_BENCH_FLOOR_SO");

/// The configurations of `ats-bench icount`: the load bench's, plus the
/// floor, a learned-limit, a rate-only, a keyed-rate and a keyed rule of
/// ours, and any `--plugin`.
fn variants(args: &Args, ours_rl: &str, ours_throttle: &str, ours_ip: &str) -> Vec<Variant> {
    let mut v = crate::variants::load_variants(ours_rl, ours_throttle, ours_ip);
    let control = v.pop().expect("the load bench ends with its A/A control");
    v.insert(
        3,
        Variant {
            key: "keyed",
            label: "our rate_limit.so, keyed (`--key=ip`)",
            host: "keyed.bench",
            plugin: format!(
                "@plugin={ours_rl}{}",
                crate::variants::pparams(KEYED_OPTIONS)
            ),
        },
    );
    v.insert(
        3,
        Variant {
            key: "keyed-rate",
            label: "our rate_limit.so, keyed rate (`--key=ip --rate`)",
            host: "keyed-rate.bench",
            plugin: format!(
                "@plugin={ours_rl}{}",
                crate::variants::pparams(KEYED_RATE_OPTIONS)
            ),
        },
    );
    v.insert(
        3,
        Variant {
            key: "rate-only",
            label: "our rate_limit.so, rate only (`--rate`)",
            host: "rate-only.bench",
            plugin: format!(
                "@plugin={ours_rl}{}",
                crate::variants::pparams(RATE_ONLY_OPTIONS)
            ),
        },
    );
    v.insert(
        1,
        Variant {
            key: "floor",
            label: "floor (minimal C limiter)",
            host: "floor.bench",
            plugin: format!("@plugin={FLOOR_SO}"),
        },
    );
    // Right after `ours` (the same .so, so callgrind names one object).
    v.insert(
        4,
        Variant {
            key: "auto",
            label: "our rate_limit.so, learned limit (`--limit=auto`)",
            host: "auto.bench",
            plugin: format!(
                "@plugin={ours_rl}{}",
                crate::variants::pparams(AUTO_OPTIONS)
            ),
        },
    );
    for (key, so, opts) in &args.plugins {
        // Leaked once per run: Variant holds 'static names, like the load bench's.
        let key: &'static str = Box::leak(key.clone().into_boxed_str());
        v.push(Variant {
            key,
            label: Box::leak(format!("{key} (`{so}`)").into_boxed_str()),
            host: Box::leak(format!("{key}.bench").into_boxed_str()),
            plugin: format!(
                "@plugin={so}{}",
                opts.iter()
                    .map(|o| format!(" @pparam={o}"))
                    .collect::<String>()
            ),
        });
    }
    v.push(control);
    if let Some(only) = &args.only {
        // `none` and `floor` are what the others are measured against; a
        // --plugin was asked for by name.
        v.retain(|x| {
            x.key == "none"
                || x.key == "floor"
                || only.iter().any(|k| k == x.key)
                || args.plugins.iter().any(|(k, _, _)| k == x.key)
        });
    }
    v
}

pub fn main(argv: &[String]) -> ExitCode {
    let args = match crate::report::args_or_exit("ats-bench icount", USAGE, parse_args(argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let ours_rl = ats_tests::plugin("rate_limit");
    let ours_throttle = ats_tests::plugin("throttle");
    let ours_ip = ats_tests::plugin("ip_throttle");
    let variants = variants(&args, &ours_rl, &ours_throttle, &ours_ip);
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
            let ctx = Context {
                machine: &machine,
                command: crate::report::command(),
            };
            let body = crate::icount_report::section(&ctx, &res);
            let name = crate::icount_report::section_name();
            crate::sections::publish("ats-bench icount", &name, body, args.out.as_deref())
        }
        Err(e) => {
            eprintln!("ats-bench icount: {e}");
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
        assert_eq!((a.requests, a.warmup, a.reps), (2000, 200, 3));
        let a = args(&[
            "--only",
            "ours,upstream",
            "--plugin",
            "b=/tmp/x.so --limit=5 --queue=1",
        ])
        .expect("valid");
        assert_eq!(a.only, Some(vec!["ours".to_owned(), "upstream".to_owned()]));
        assert_eq!(
            a.plugins,
            vec![(
                "b".to_owned(),
                "/tmp/x.so".to_owned(),
                vec!["--limit=5".to_owned(), "--queue=1".to_owned()]
            )]
        );
        assert!(args(&["--plugin", "/tmp/x.so"]).is_err(), "no key");
        assert!(args(&["--plugin", "b="]).is_err(), "no .so");
        assert!(args(&["--reps", "0"]).is_err());
    }

    #[test]
    fn the_learned_limit_is_measured_beside_the_fixed_one() {
        let a = args(&[]).expect("defaults");
        let v = variants(&a, "/rl.so", "/t.so", "/ip.so");
        let keys: Vec<&str> = v.iter().map(|x| x.key).collect();
        let ours = keys.iter().position(|k| *k == "ours").expect("ours");
        assert_eq!(keys.get(ours + 1), Some(&"auto"), "{keys:?}");
        assert!(v[ours + 1]
            .plugin
            .starts_with("@plugin=/rl.so @pparam=--limit=auto"));
        assert_eq!(keys.last(), Some(&"control"));
        let a = args(&["--only", "auto"]).expect("valid");
        let keys: Vec<&str> = variants(&a, "/rl.so", "/t.so", "/ip.so")
            .iter()
            .map(|x| x.key)
            .collect();
        assert_eq!(keys, ["none", "floor", "auto"]);
    }
}
