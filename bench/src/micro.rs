//! The micro-benchmark table, read from criterion's result files
//! (`<criterion dir>/<group>/<function>/new/{benchmark,estimates}.json`).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::report::Context;

/// One benchmark's estimate, nanoseconds per iteration.
#[derive(Clone, Debug)]
pub struct Estimate {
    pub id: String,
    pub ns: f64,
    pub lower: f64,
    pub upper: f64,
}

/// What each benchmark measures and the target it has, if any, in the
/// order the table lists them. Benchmarks not listed here go last.
pub const KNOWN: &[(&str, &str, Option<f64>)] = &[
    ("slots/acquire_release", "Admission (rate_limit.so, per transaction): take a concurrency slot and release it, uncontended", Some(50.0)),
    ("slots/acquire_release_2threads", "The same while a second thread admits into the same rule in a tight loop", None),
    ("gcra/check_conforming", "Rate bucket check that admits (one compare-and-swap)", None),
    ("gcra/check_denied", "Rate bucket check that refuses (no write)", None),
    ("gcra/check_with_clock", "Monotonic clock read + rate bucket check, as the plugin does it", None),
    ("gcra/check_with_clock_2threads", "The same with a second thread checking the same bucket", None),
    ("queue/push_pop_handoff", "Queue: slot held, waiter pushed, holder releases, waiter popped and admitted (FIFO hand-off), slot released", None),
    ("queue/enqueue_cancel", "Queue: waiter pushed, then leaves (client gone or --maxage)", None),
    ("budget/take_return", "Queue-capacity token taken and returned", None),
    ("clock/monotonic_now", "Reading the monotonic clock (reference)", None),
    ("throttle/ticket_enter_leave", "throttle.so counter path: ticket on the rule, enter, leave", None),
    ("throttle/ticket_enter_leave_2threads", "The same while a second thread counts into the same rule", None),
    ("options/parse_typical", "rate_limit.so option parsing, 5 options (per rule, at load)", None),
    ("options/parse_split_rate", "rate_limit.so option parsing, separate-value form with --rate", None),
    ("throttle/params_parse", "throttle.so parameter parsing, 4 items (per rule, at load)", None),
];

/// The estimate criterion prints as "time": the regression slope when it
/// sampled linearly, otherwise the mean.
fn estimate(estimates: &Value) -> Option<(f64, f64, f64)> {
    let e = match &estimates["slope"] {
        Value::Null => &estimates["mean"],
        slope => slope,
    };
    Some((
        e["point_estimate"].as_f64()?,
        e["confidence_interval"]["lower_bound"].as_f64()?,
        e["confidence_interval"]["upper_bound"].as_f64()?,
    ))
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every `new/benchmark.json` up to three directories below `dir`.
fn result_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if p.file_name().is_some_and(|n| n == "new") && p.join("benchmark.json").is_file() {
            out.push(p);
        } else if depth > 0 && p.file_name().is_some_and(|n| n != "report") {
            result_dirs(&p, depth - 1, out);
        }
    }
}

/// Reads all results under `dir`, known ones first in table order.
pub fn read(dir: &Path) -> Result<Vec<Estimate>, String> {
    let mut dirs = Vec::new();
    result_dirs(dir, 3, &mut dirs);
    let mut out = Vec::new();
    for d in dirs {
        let bench = read_json(&d.join("benchmark.json"))?;
        let id = bench["full_id"]
            .as_str()
            .ok_or_else(|| format!("{}: no full_id", d.display()))?
            .to_owned();
        let (ns, lower, upper) = estimate(&read_json(&d.join("estimates.json"))?)
            .ok_or_else(|| format!("{}: unexpected estimates.json", d.display()))?;
        out.push(Estimate {
            id,
            ns,
            lower,
            upper,
        });
    }
    let rank = |id: &str| KNOWN.iter().position(|k| k.0 == id).unwrap_or(KNOWN.len());
    out.sort_by(|a, b| rank(&a.id).cmp(&rank(&b.id)).then(a.id.cmp(&b.id)));
    Ok(out)
}

/// Nanoseconds for the micro table.
fn time_ns(ns: f64) -> String {
    if ns < 100.0 {
        format!("{ns:.1} ns")
    } else if ns < 10_000.0 {
        format!("{ns:.0} ns")
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

pub fn micro_section(ctx: &Context, dir: &Path, estimates: &[Estimate]) -> String {
    let mut s = String::from("## Micro-benchmarks (criterion)\n\n");
    s += &ctx.provenance();
    let _ = writeln!(
        s,
        "Read from criterion's results in `{}` (written by `ci/bench.sh`, which runs \
         `cargo bench -p limits -p rate-limit-core -p throttle-core -p keyed --bench admission \
         --bench options --bench gate --bench keyed` first). Time per iteration is criterion's estimate \
         with its 95 % confidence interval. \"2threads\": this thread measured while a \
         second one does the same on the same object in a tight loop — the worst case of \
         ATS's two exec threads admitting into one rule at once.\n",
        dir.display()
    );
    s += "| benchmark | what it measures | time per iteration | 95 % CI | target |\n|---|---|--:|--:|---|\n";
    for e in estimates {
        let (what, target) = KNOWN
            .iter()
            .find(|k| k.0 == e.id)
            .map_or(("", None), |k| (k.1, k.2));
        let target = match target {
            Some(t) if e.ns <= t => format!("≤ {t:.0} ns: met"),
            Some(t) => format!("≤ {t:.0} ns: **missed**"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "| `{}` | {what} | {} | {}–{} | {target} |",
            e.id,
            time_ns(e.ns),
            time_ns(e.lower),
            time_ns(e.upper)
        );
    }
    s + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_the_slope_and_falls_back_to_the_mean() {
        let ci = |p: f64| serde_json::json!({"confidence_interval": {"confidence_level": 0.95, "lower_bound": p - 1.0, "upper_bound": p + 1.0}, "point_estimate": p, "standard_error": 0.1});
        let with_slope = serde_json::json!({"mean": ci(20.0), "slope": ci(12.0)});
        assert_eq!(estimate(&with_slope), Some((12.0, 11.0, 13.0)));
        let flat = serde_json::json!({"mean": ci(20.0), "slope": null});
        assert_eq!(estimate(&flat), Some((20.0, 19.0, 21.0)));
    }
}
