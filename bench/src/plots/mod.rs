//! `ats-bench plots`: convergence plots of `--limit=auto`'s controller
//! (issue 34), from crates/adaptive's model origin: no Traffic Server, a
//! second or so for all of them.
//!
//! Each scenario (`scenarios.rs`) is run, judged against the bound the
//! issue sets for it, drawn (`render.rs` on `chart.rs` and `canvas.rs`)
//! and encoded by a small PNG writer of our own (`png.rs`); `report.rs`
//! writes the BENCHMARKS.md section that shows them. `--check` does all of
//! it but write, and fails when a run leaves its bound: `ci/bench.sh
//! --smoke`'s check that the plots committed still say what the
//! controller does.

mod canvas;
mod chart;
mod png;
mod render;
mod report;
mod scenarios;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
usage: ats-bench plots --out-dir DIR [--out FILE]
       ats-bench plots --check

Convergence plots of --limit=auto's controller against crates/adaptive's
model origin (issue 34): one PNG per scenario, and a section of FILE with
each plot, what to see in it and whether its run met its bound.

  --out-dir DIR  write the PNGs there (created if missing), e.g. bench/plots
  --out FILE     update FILE's generated adaptive-plots section (e.g. BENCHMARKS.md);
                 its image links are relative to FILE's directory
  --check        write nothing; fail if a scenario leaves its bound (ci/bench.sh --smoke)
";

struct Args {
    out_dir: Option<PathBuf>,
    out: Option<PathBuf>,
    check: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        out_dir: None,
        out: None,
        check: false,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--out-dir" => a.out_dir = Some(PathBuf::from(value()?)),
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--check" => a.check = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    match (a.check, &a.out_dir, &a.out) {
        (true, None, None) | (false, Some(_), _) => Ok(a),
        (true, _, _) => Err("--check writes nothing: no --out-dir or --out".into()),
        (false, None, _) => Err("--out-dir is needed (or --check)".into()),
    }
}

/// `dir` as a link from a markdown file in `from` (the path as given when
/// it is not under `from`).
fn link(dir: &Path, from: &Path) -> String {
    let rel = match (dir.canonicalize(), from.canonicalize()) {
        (Ok(d), Ok(f)) => d.strip_prefix(&f).map(Path::to_path_buf).ok(),
        _ => None,
    };
    rel.unwrap_or_else(|| dir.to_path_buf())
        .display()
        .to_string()
}

fn run(args: &Args) -> Result<bool, String> {
    let all = scenarios::all();
    let mut judged = Vec::new();
    for sc in &all {
        let points = scenarios::run(sc);
        let verdict = scenarios::judge(sc, &points);
        let png = render::png(sc, &points)?;
        let said = if verdict.problems.is_empty() {
            format!("bound met: {}", verdict.notes.join("; "))
        } else {
            format!("BOUND NOT MET: {}", verdict.problems.join("; "))
        };
        eprintln!("{}: {said}", sc.name);
        if let Some(dir) = &args.out_dir {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let file = dir.join(format!("{}.png", sc.name));
            fs::write(&file, &png).map_err(|e| format!("{}: {e}", file.display()))?;
            eprintln!("  wrote {} ({} bytes)", file.display(), png.len());
        }
        judged.push((sc, verdict, png.len()));
    }
    let met = judged.iter().all(|(_, v, _)| v.problems.is_empty());
    if let Some(dir) = &args.out_dir {
        let from = match args.out.as_deref().and_then(Path::parent) {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prov = report::Provenance {
            date: crate::sys::utc_now(),
            source: crate::sys::source_provenance(),
            command: crate::report::command(),
        };
        let plots: Vec<_> = judged
            .iter()
            .map(|(scenario, verdict, bytes)| report::Plot {
                scenario,
                verdict,
                bytes: *bytes,
            })
            .collect();
        let body = report::section(&prov, &link(dir, &from), &plots);
        if crate::sections::publish("ats-bench plots", report::NAME, body, args.out.as_deref())
            != ExitCode::SUCCESS
        {
            return Err("the section was not written".into());
        }
    }
    Ok(met)
}

pub fn main(argv: &[String]) -> ExitCode {
    const CMD: &str = "ats-bench plots";
    let args = match crate::report::args_or_exit(CMD, USAGE, parse_args(argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{CMD}: a scenario left its bound (above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{CMD}: {e}");
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
    fn check_writes_nothing_and_a_run_needs_a_directory() {
        assert!(args("--check").is_ok_and(|a| a.check && a.out_dir.is_none()));
        assert!(args("--check --out-dir x").is_err());
        assert!(args("--check --out B.md").is_err());
        assert!(args("").is_err());
        assert!(args("--out B.md").is_err());
        assert!(args("--out-dir bench/plots --out B.md").is_ok());
        assert!(args("--out-dir").is_err());
    }

    /// What `ci/bench.sh --smoke` checks, as a unit test too: every
    /// scenario meets its bound, and every plot encodes.
    #[test]
    fn every_scenario_meets_its_bound() {
        for sc in scenarios::all() {
            let points = scenarios::run(&sc);
            let v = scenarios::judge(&sc, &points);
            assert!(v.problems.is_empty(), "{}: {:?}", sc.name, v.problems);
            assert!(!v.notes.is_empty());
            let png = render::png(&sc, &points).expect("encodes");
            assert!(png.len() > (chart::WIDTH * chart::HEIGHT / 2) as usize);
        }
    }

    #[test]
    fn a_run_outside_its_bound_is_a_problem() {
        let mut all = scenarios::all();
        for sc in &mut all {
            sc.bound = match sc.bound {
                // Each run met these (above) by more than a second or one request.
                scenarios::Bound::Settles { .. } => scenarios::Bound::Settles { within: 0 },
                scenarios::Bound::PeakBelow { after, .. } => {
                    scenarios::Bound::PeakBelow { after, max: 1 }
                }
                scenarios::Bound::BacksOff { .. } => scenarios::Bound::BacksOff { after: 0 },
            };
            let v = scenarios::judge(sc, &scenarios::run(sc));
            assert!(!v.problems.is_empty(), "{}: {:?}", sc.name, v.notes);
        }
    }
}
