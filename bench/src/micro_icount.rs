//! `ats-bench micro-icount`: instructions per operation of the criterion
//! micro-benchmarks, counted by callgrind, against a committed baseline.
//!
//! Runs the `micro-icount` binary (bench/micro-icount: each operation N
//! times in its own never-inlined function) once under
//! `valgrind --tool=callgrind`, and divides each function's inclusive cost
//! by N. A small dedicated binary rather than iai-callgrind/gungraun: no
//! runner to `cargo install` in CI, one valgrind run of ~2 s for all
//! operations, and the parser is the one `ats-bench icount` uses.
//!
//! `--check` fails when an operation costs more than its baseline by more
//! than [`THRESHOLD_PCT`] % and [`THRESHOLD_ABS`] instructions (see there
//! for why). The section it writes into BENCHMARKS.md is
//! `micro_icount_report`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::callgrind::Profile;
use crate::micro_icount_report as report;

pub const USAGE: &str = "\
usage: ats-bench micro-icount [--check] [--write] [--baseline FILE] [--out FILE]
       ats-bench micro-icount --baseline-only --out FILE

  --check          fail if an operation needs more instructions than its baseline
                   (more than 5 % and more than 8 instructions)
  --write          store this run's counts as the new baseline
  --baseline FILE  default bench/micro-icount/baseline.tsv
  --out FILE       update the generated micro-icount section of FILE (e.g. BENCHMARKS.md);
                   its baseline column is read from the baseline file after --write
  --baseline-only  measure nothing: rewrite only the baseline column of FILE's
                   micro-icount section from the baseline file (its header line says so)
";

/// Counts are reproducible to the instruction when nothing changed (the
/// toolchain is pinned; the only run-to-run variation is the keyed tables'
/// random hash seed, measured at < 0.5 %). 5 % is far above that and below
/// what a real regression on these paths costs: one more thread-local
/// access (~11 instructions through `__tls_get_addr`), atomic or allocation
/// on a 20–80 instruction path is 15 % or more. The absolute floor keeps a
/// different inlining decision (2–3 instructions) on the smallest paths
/// from failing CI.
pub const THRESHOLD_PCT: f64 = 5.0;
pub const THRESHOLD_ABS: f64 = 8.0;

struct Args {
    check: bool,
    write: bool,
    baseline_only: bool,
    baseline: PathBuf,
    out: Option<PathBuf>,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        check: false,
        write: false,
        baseline_only: false,
        baseline: Path::new(env!("CARGO_MANIFEST_DIR")).join("micro-icount/baseline.tsv"),
        out: None,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--check" => a.check = true,
            "--write" => a.write = true,
            "--baseline-only" => a.baseline_only = true,
            "--baseline" => a.baseline = PathBuf::from(value()?),
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.baseline_only && (a.check || a.write || a.out.is_none()) {
        return Err(
            "--baseline-only measures nothing: it needs --out FILE, and no --check or --write"
                .into(),
        );
    }
    Ok(a)
}

/// Instructions per operation, by criterion id, in the binary's order.
pub fn measure() -> Result<Vec<(String, f64)>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("micro-icount");
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release -p micro-icount` (ci/bench.sh does)",
            bin.display()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let out_file = dir.path().join("callgrind.out");
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&bin)
        .output()
        .map_err(|e| format!("cannot run valgrind (apt-get install valgrind): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{} under callgrind failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = fs::read_to_string(&out_file).map_err(|e| format!("{}: {e}", out_file.display()))?;
    let profile = Profile::parse(&text)?;
    let mut counts = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let ["op", id, symbol, n] = f[..] else {
            continue;
        };
        let n: f64 = n.parse().map_err(|_| format!("bad line '{line}'"))?;
        let ir = profile.inclusive(|name| name == symbol);
        if ir == 0 {
            return Err(format!("no instructions counted for {symbol} ({id})"));
        }
        counts.push((id.to_owned(), ir as f64 / n));
    }
    if counts.is_empty() {
        return Err(format!("{} listed no operations", bin.display()));
    }
    Ok(counts)
}

pub fn read_baseline(path: &Path) -> Result<BTreeMap<String, f64>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (id, v) = l
                .split_once('\t')
                .ok_or_else(|| format!("{}: bad line '{l}'", path.display()))?;
            let v = v
                .trim()
                .parse()
                .map_err(|_| format!("{}: bad count in '{l}'", path.display()))?;
            Ok((id.to_owned(), v))
        })
        .collect()
}

fn write_baseline(path: &Path, counts: &[(String, f64)]) -> Result<(), String> {
    let mut s = String::from(
        "# Instructions per operation of the micro-benchmarks (callgrind), written by\n\
         # `ats-bench micro-icount --write`; `ci/bench.sh --smoke` fails on a regression\n\
         # above 5 % and 8 instructions. Update it with the change that moves a count.\n",
    );
    for (id, v) in counts {
        let _ = writeln!(s, "{id}\t{v:.1}");
    }
    fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}

/// Verdict per operation: `None` if within the threshold.
fn regression(base: f64, now: f64) -> Option<String> {
    let d = now - base;
    (d > THRESHOLD_ABS && d > base * THRESHOLD_PCT / 100.0)
        .then(|| format!("{now:.1} vs {base:.1} (+{:.1} %)", d / base * 100.0))
}

pub fn main(argv: &[String]) -> ExitCode {
    let args = match crate::report::args_or_exit("ats-bench micro-icount", USAGE, parse_args(argv))
    {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ats-bench micro-icount: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `file` as a section names it: relative to the directory of `doc` (where
/// `ats-bench check-sections` resolves it) if it is below it.
fn shown_path(file: &Path, doc: &Path) -> String {
    let dir = match doc.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (file.canonicalize(), dir.canonicalize()) {
        (Ok(f), Ok(d)) => f
            .strip_prefix(&d)
            .map_or_else(|_| f.display().to_string(), |r| r.display().to_string()),
        _ => file.display().to_string(),
    }
}

/// Rewrites only the baseline column of `out`'s section from the file.
fn baseline_only(baseline: &Path, out: &Path) -> Result<(), String> {
    let base = read_baseline(baseline)?;
    let shown = shown_path(baseline, out);
    let text = fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let body = crate::sections::body(&text, report::NAME)
        .ok_or_else(|| format!("{} has no {} section", out.display(), report::NAME))?;
    let dir = baseline.parent().unwrap_or(Path::new("."));
    let name = baseline.file_name().map(Path::new).unwrap_or(baseline);
    let name = name.to_str().unwrap_or_default();
    let state = match crate::sys::git(dir, &["log", "-1", "--format=%h", "--", name]) {
        Some(c) if !c.is_empty() => {
            let dirty = crate::sys::git(dir, &["status", "--porcelain", "--", name]);
            match dirty {
                Some(d) if d.is_empty() => format!("as committed in {c}"),
                _ => format!("last committed in {c}, with uncommitted changes"),
            }
        }
        _ => "not in a git checkout".to_owned(),
    };
    let date = crate::sys::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
        .unwrap_or_default()
        .trim()
        .to_owned();
    let note = report::refresh_note(&shown, &state, &date);
    let body = report::refresh(body, &base, &shown, &note)?;
    crate::sections::update(out, &[(report::NAME, body)])
}

fn run(args: &Args) -> Result<bool, String> {
    if let (true, Some(out)) = (args.baseline_only, &args.out) {
        baseline_only(&args.baseline, out)?;
        eprintln!(
            "updated the baseline column of {}'s {} section from {}",
            out.display(),
            report::NAME,
            args.baseline.display()
        );
        return Ok(true);
    }
    let counts = measure()?;
    let base = if args.baseline.is_file() {
        read_baseline(&args.baseline)?
    } else if args.check {
        return Err(format!("no baseline at {}", args.baseline.display()));
    } else {
        BTreeMap::new()
    };
    let mut ok = true;
    for (id, v) in &counts {
        let verdict = match base.get(id) {
            None => "new (not in the baseline)".to_owned(),
            Some(&b) => match regression(b, *v) {
                Some(r) if args.check => {
                    ok = false;
                    format!("REGRESSION {r}")
                }
                Some(r) => format!("regression {r}"),
                None => format!("ok (baseline {b:.1})"),
            },
        };
        println!("{id:<36} {v:>10.1} Ir/op  {verdict}");
    }
    for id in base.keys() {
        if !counts.iter().any(|(c, _)| c == id) {
            println!("{id:<36} in the baseline but no longer measured");
        }
    }
    if args.write {
        write_baseline(&args.baseline, &counts)?;
        eprintln!("wrote {}", args.baseline.display());
        if args.out.is_none() {
            eprintln!(
                "not written without --out: BENCHMARKS.md's {} section, whose baseline column \
                 `ci/bench.sh --smoke` checks against this file; rerun with --out BENCHMARKS.md, \
                 or rewrite only that column with --baseline-only --out BENCHMARKS.md",
                report::NAME
            );
        }
    }
    if let Some(out) = &args.out {
        let machine = crate::sys::Machine::probe();
        let ctx = crate::report::Context {
            machine: &machine,
            command: format!(
                "ats-bench micro-icount{}",
                if args.write { " --write" } else { "" }
            ),
        };
        // The baseline as the file holds it now (after --write: this run's counts).
        let base = if args.baseline.is_file() {
            read_baseline(&args.baseline)?
        } else {
            BTreeMap::new()
        };
        let shown = shown_path(&args.baseline, out);
        let body = report::section(&counts, &base, &shown, &ctx);
        crate::sections::update(out, &[(report::NAME, body)])?;
        eprintln!("updated {}", out.display());
    }
    if !ok {
        eprintln!(
            "instruction counts regressed (threshold: +{THRESHOLD_PCT} % and +{THRESHOLD_ABS} \
             instructions over {}); if intended, rerun with --write and commit the baseline",
            args.baseline.display()
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_needs_both_the_share_and_the_instructions() {
        assert!(regression(100.0, 104.0).is_none());
        assert!(
            regression(100.0, 106.0).is_none(),
            "6 instructions: under the floor"
        );
        assert!(regression(100.0, 109.0).is_some());
        assert!(regression(1000.0, 1040.0).is_none(), "4 %");
        assert!(regression(1000.0, 1060.0).is_some());
        assert!(regression(100.0, 50.0).is_none(), "improvements pass");
    }
}
