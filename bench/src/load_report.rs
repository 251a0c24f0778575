//! The load bench's section: requests per second, latency and
//! traffic_server's CPU per request for every configuration, with the
//! per-round ratios against no plugin and their confidence intervals.

use std::fmt::Write as _;

use crate::load::{LoadResults, Run, Variant, WORKLOADS};
use crate::report::{int, time_us, Context};
use crate::stats::{diffs, max, median, median_ci95, min, ratios};
use crate::sys;

/// A ratio with its percentage change: "0.987 (−1.3 %)".
fn ratio(r: f64) -> String {
    if !r.is_finite() {
        return "n/a".into();
    }
    let pct = (r - 1.0) * 100.0;
    let sign = if pct < 0.0 { "−" } else { "+" };
    format!("{r:.3} ({sign}{:.1} %)", pct.abs())
}

fn signed_us(us: f64) -> String {
    if !us.is_finite() {
        return "n/a".into();
    }
    let sign = if us < 0.0 { "−" } else { "+" };
    format!("{sign}{:.2} µs", us.abs())
}

/// A run during which other processes used more than this many cores was
/// disturbed (e.g. a build on the shared machine); its round is left out.
pub const OTHER_LOAD_LIMIT: f64 = 0.2;

/// Rounds in which every run stayed under [`OTHER_LOAD_LIMIT`]; all rounds
/// (and `false`) if fewer than half, or fewer than 5, are clean.
fn clean_rounds(runs: &[Vec<Run>]) -> (Vec<usize>, bool) {
    let n = runs.iter().map(Vec::len).min().unwrap_or(0);
    let clean: Vec<usize> = (0..n)
        .filter(|&r| runs.iter().all(|v| v[r].other_cores() <= OTHER_LOAD_LIMIT))
        .collect();
    if clean.len() >= 5 && clean.len() * 2 >= n {
        (clean, true)
    } else {
        ((0..n).collect(), false)
    }
}

/// Median with its 95 % confidence interval: "0.987 (−1.3 %) [0.962–1.004]".
fn ratio_ci(rs: &[f64]) -> String {
    let (lo, hi) = median_ci95(rs);
    format!("{} [{lo:.3}–{hi:.3}]", ratio(median(rs)))
}

/// Median difference in µs with its 95 % confidence interval.
fn us_ci(ds: &[f64]) -> String {
    let (lo, hi) = median_ci95(ds);
    format!(
        "{} [{}, {}]",
        signed_us(median(ds)),
        signed_us(lo),
        signed_us(hi)
    )
}

pub fn load_section(
    ctx: &Context,
    variants: &[Variant],
    res: &LoadResults,
    ats_settings: &str,
) -> String {
    let mut s = String::from("## Load bench: cost per request\n\n");
    s += &ctx.provenance();
    s += &format!(
        "One traffic_server ({ats_settings}) with one remap rule per configuration, identical \
         except for the plugin, all to the same nginx origin:\n\n\
         | configuration | plugin on the rule |\n|---|---|\n"
    );
    for v in variants {
        let p = if v.plugin.is_empty() {
            "—".to_owned()
        } else {
            format!("`{}`", v.plugin)
        };
        let _ = writeln!(s, "| {} | {p} |", v.label);
    }
    let wrk_args = res.load.args().join(" ");
    let pinned = match res.load.cpu {
        Some(c) => format!(", wrk and nginx pinned to CPU {c}, traffic_server to the other"),
        None => String::new(),
    };
    let warm = if res.warmup.is_zero() {
        "no warm-up round".to_owned()
    } else {
        format!(
            "a warm-up round of {} s per run (discarded)",
            res.warmup.as_secs()
        )
    };
    let _ = write!(
        s,
        "\nLoad: `wrk {wrk_args} -H 'Host: <rule>'` on loopback (keep-alive, fixed \
         concurrency{pinned}); one workload after the other, each with {warm}, then {} rounds, \
         each running every configuration once; the order rotates by one each round (A B C D E, \
         B C D E A, ...) so that drift and position effects hit all alike. A round in which \
         processes other than traffic_server, nginx, wrk and the bench used more than \
         {OTHER_LOAD_LIMIT} cores during any run is left out (the machine is shared).\n\n\
         - **req/s**: median over rounds, and min–max. **p50/p99**: medians over rounds of \
         wrk's per-run latency percentiles.\n\
         - **ATS CPU**: user+system time of the traffic_server process from `/proc/<pid>/stat` \
         (CLK_TCK {}) around each run, per 100 000 requests; **cores busy**: that time over \
         the run's wall time.\n\
         - **vs none**, **ours/upstream**: medians of the per-round ratios, with a 95 % \
         confidence interval of that median in brackets (order statistics, no distribution \
         assumed). An interval that contains 1 means no measurable difference. The **A/A \
         control** row compares two identical rules and shows the noise floor.\n\
         - **extra CPU/req**: median over rounds of (CPU per request − that of no plugin in \
         the same round), with its 95 % interval.\n\
         - **origin req/req**: requests nginx served per client request (0 = every response \
         came from cache).\n\n",
        res.rounds,
        sys::clock_ticks_per_second()
    );
    if !res.origin.is_empty() {
        s += "Origin alone (nginx, one process, wrk straight at it with the same load): ";
        let parts: Vec<String> = res
            .origin
            .iter()
            .map(|(w, r)| {
                format!(
                    "`{}` {} req/s (p50 {}, p99 {})",
                    w.path(),
                    int(r.rps),
                    time_us(r.p50_us),
                    time_us(r.p99_us)
                )
            })
            .collect();
        s += &parts.join("; ");
        s += ". Through ATS the same 2 CPUs also run traffic_server and wrk, so what the \
              origin costs the proxied workload is its share of the CPUs, not its capacity.\n\n";
    }
    let idx = |key: &str| variants.iter().position(|v| v.key == key);
    for (wi, w) in WORKLOADS.iter().enumerate() {
        let runs = &res.runs[wi];
        let (keep, filtered) = clean_rounds(runs);
        let _ = writeln!(s, "### {} (`GET {}`)\n", w.title(), w.path());
        let _ = writeln!(
            s,
            "{} of {} rounds used{}.\n",
            keep.len(),
            runs.first().map_or(0, Vec::len),
            if filtered {
                ""
            } else {
                " (all: fewer than 5, or fewer than half, were undisturbed)"
            }
        );
        s += "| configuration | req/s | min–max | p50 | p99 | ATS CPU-s per 100k req | ATS cores busy \
              | req/s vs none | CPU/req vs none | extra CPU/req | origin req/req |\n\
              |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
        let col = |vi: usize, f: &dyn Fn(&Run) -> f64| -> Vec<f64> {
            keep.iter().map(|&r| f(&runs[vi][r])).collect()
        };
        let none = idx("none");
        let mut problems = Vec::new();
        for (vi, v) in variants.iter().enumerate() {
            let rps = col(vi, &|r| r.wrk.rps);
            let cpu = col(vi, &|r| r.cpu_per_100k());
            let (vs_rps, vs_cpu, extra) = match none {
                Some(n) if n != vi => {
                    let base = col(n, &|r| r.cpu_per_100k());
                    // CPU-s per 100k requests -> µs per request: ×10.
                    let extra: Vec<f64> = diffs(&cpu, &base).iter().map(|d| d * 10.0).collect();
                    (
                        ratio_ci(&ratios(&rps, &col(n, &|r| r.wrk.rps))),
                        ratio_ci(&ratios(&cpu, &base)),
                        us_ci(&extra),
                    )
                }
                _ => ("—".into(), "—".into(), "—".into()),
            };
            let used: Vec<&Run> = keep.iter().map(|&r| &runs[vi][r]).collect();
            let requests: u64 = used.iter().map(|r| r.wrk.requests).sum();
            let origin: u64 = used.iter().map(|r| r.origin_requests).sum();
            let errors: u64 = runs[vi]
                .iter()
                .map(|r| r.wrk.non_2xx + r.wrk.socket_errors)
                .sum();
            if errors > 0 {
                problems.push(format!(
                    "{}: {errors} non-2xx responses or socket errors",
                    v.label
                ));
            }
            let _ = writeln!(
                s,
                "| {} | {} | {}–{} | {} | {} | {:.3} | {:.2} | {vs_rps} | {vs_cpu} | {extra} | {:.3} |",
                v.label,
                int(median(&rps)),
                int(min(&rps)),
                int(max(&rps)),
                time_us(median(&col(vi, &|r| r.wrk.p50_us))),
                time_us(median(&col(vi, &|r| r.wrk.p99_us))),
                median(&cpu),
                median(&col(vi, &|r| r.ats_cores())),
                origin as f64 / requests.max(1) as f64,
            );
        }
        if let (Some(o), Some(u)) = (idx("ours"), idx("upstream")) {
            let rps = ratios(&col(o, &|r| r.wrk.rps), &col(u, &|r| r.wrk.rps));
            let cpu = ratios(
                &col(o, &|r| r.cpu_per_100k()),
                &col(u, &|r| r.cpu_per_100k()),
            );
            let _ = writeln!(
                s,
                "\n**Ours / upstream** (our rate_limit.so against upstream's, median of per-round \
                 ratios [95 % CI]): req/s {}, CPU per request {}.",
                ratio_ci(&rps),
                ratio_ci(&cpu)
            );
        }
        let all: Vec<&Run> = runs.iter().flatten().collect();
        let other: Vec<f64> = all.iter().map(|r| r.other_cores()).collect();
        let nginx: Vec<f64> = all.iter().map(|r| r.nginx_cores()).collect();
        let _ = writeln!(
            s,
            "\nOver all rounds of this workload nginx used {:.2} cores (median), and other \
             processes {:.2} cores (median; max {:.2}).",
            median(&nginx),
            median(&other),
            max(&other)
        );
        if !problems.is_empty() {
            let _ = writeln!(s, "\n**Errors during the runs:** {}.", problems.join("; "));
        }
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(ratio(0.987), "0.987 (−1.3 %)");
        assert_eq!(signed_us(0.5), "+0.50 µs");
        assert_eq!(
            ratio_ci(&[1.0, 2.0, 3.0, 4.0]),
            "2.500 (+150.0 %) [1.000–4.000]"
        );
        assert_eq!(us_ci(&[0.1, 0.2, 0.3]), "+0.20 µs [+0.10 µs, +0.30 µs]");
    }

    fn run(other_s: f64) -> Run {
        Run {
            wrk: crate::wrk::WrkResult {
                requests: 1000,
                seconds: 1.0,
                rps: 1000.0,
                p50_us: 100.0,
                p99_us: 200.0,
                non_2xx: 0,
                socket_errors: 0,
            },
            cpu_s: 0.5,
            origin_requests: 0,
            nginx_s: 0.0,
            other_s,
            wall_s: 1.0,
        }
    }

    #[test]
    fn disturbed_rounds_are_left_out_unless_too_many() {
        let quiet = |n| (0..n).map(|_| run(0.0)).collect::<Vec<_>>();
        let mut a = quiet(8);
        a[2] = run(0.5);
        let (keep, filtered) = clean_rounds(&[a, quiet(8)]);
        assert!(filtered);
        assert_eq!(keep, [0, 1, 3, 4, 5, 6, 7]);
        let noisy: Vec<Run> = (0..8).map(|i| run(if i < 5 { 0.9 } else { 0.0 })).collect();
        assert_eq!(clean_rounds(&[noisy, quiet(8)]), ((0..8).collect(), false));
        assert_eq!(clean_rounds(&[quiet(3)]), (vec![0, 1, 2], false));
    }
}
