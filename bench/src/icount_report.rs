//! What `ats-bench icount` found, as a markdown section: instructions per
//! request per configuration and workload with every repetition, what each
//! plugin adds over the no-plugin rule, and where those instructions go
//! (split as described in `attribution`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::attribution::{average, inside_api, share, Share};
use crate::callgrind::Func;
use crate::icount::{Results, Window};
use crate::load::{Workload, WORKLOADS};
use crate::report::Context;

fn per_request(w: &Window) -> f64 {
    w.ir as f64 / w.requests as f64
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

use crate::report::grouped as int;

/// A function name without its C++ parameter list, for tables.
fn display(name: &str) -> String {
    let cut = match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    format!("`{}`", cut.replace('|', "\\|"))
}

/// Last path component of an object (`/usr/bin/traffic_server` -> `traffic_server`).
fn short(object: &str) -> &str {
    object.rsplit('/').next().unwrap_or(object)
}

/// The windows of one variant and workload, by repetition.
fn windows(r: &Results, v: usize, w: Workload) -> Vec<&Window> {
    let mut ws: Vec<&Window> = r
        .windows
        .iter()
        .filter(|x| x.variant == v && x.workload == w)
        .collect();
    ws.sort_by_key(|x| x.rep);
    ws
}

/// Per variant and workload: Ir/request per rep, added per rep, mean share.
struct Row {
    reps: Vec<f64>,
    added: Vec<f64>,
    share: Share,
}

fn row(r: &Results, v: usize, w: Workload) -> Row {
    let mine = windows(r, v, w);
    let none = windows(r, 0, w);
    let reps: Vec<f64> = mine.iter().map(|x| per_request(x)).collect();
    let added = mine
        .iter()
        .zip(&none)
        .map(|(a, b)| per_request(a) - per_request(b))
        .collect();
    let shares: Vec<Share> = mine
        .iter()
        .map(|x| share(&x.profile, &r.objects[v], x.requests))
        .collect();
    Row {
        reps,
        added,
        share: average(&shares),
    }
}

/// ATS's own code: traffic_server and its libraries (libtscore, ...; in 10
/// libtsapi, libswoc, ...) of the install under test (`ATS_PREFIX`). Shared
/// libraries (libc, libstdc++, ld.so) are left out of the machinery list:
/// most of their increase comes from the plugin's own calls
/// (`__dynamic_cast` under `TSUserArgGet`, `__tls_get_addr`).
fn is_ats(object: &str) -> bool {
    let path = std::path::Path::new(object);
    path == ats_tests::ats::bin("traffic_server")
        || (path.parent() == Some(ats_tests::ats::lib_dir().as_path())
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lib")))
}

/// Mean self-cost difference per function of ATS itself, outside the
/// plugin's API calls, against the no-plugin windows of the same
/// repetitions, per request, largest first: the ATS machinery.
fn machinery_fns(r: &Results, v: usize, w: Workload, top: usize) -> Vec<(Func, f64)> {
    let mine = windows(r, v, w);
    let none = windows(r, 0, w);
    let mut diff: BTreeMap<Func, f64> = BTreeMap::new();
    let k = mine.len().max(1) as f64;
    for (a, b) in mine.iter().zip(&none) {
        let api = inside_api(&a.profile, &r.objects[v]);
        for (f, &ir) in &a.profile.self_cost {
            if is_ats(&f.object) && !api.contains(f) {
                *diff.entry(f.clone()).or_default() += ir as f64 / a.requests as f64 / k;
            }
        }
        for (f, &ir) in &b.profile.self_cost {
            if is_ats(&f.object) {
                *diff.entry(f.clone()).or_default() -= ir as f64 / b.requests as f64 / k;
            }
        }
    }
    let mut v: Vec<(Func, f64)> = diff.into_iter().filter(|(_, d)| *d >= 1.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(top);
    v
}

/// The BENCHMARKS.md section of the Traffic Server under test: `icount`
/// for 9.2 (as before there were two), `icount-MAJOR.MINOR` for later ones,
/// so each version's run replaces only its own table.
pub fn section_name() -> String {
    match ats_tests::ats::version() {
        (9, _) => "icount".to_owned(),
        (major, minor) => format!("icount-{major}.{minor}"),
    }
}

pub fn section(ctx: &Context, r: &Results) -> String {
    let a = &r.args;
    let (major, minor) = ats_tests::ats::version();
    let mut s =
        format!("## Instructions per request (callgrind), Traffic Server {major}.{minor}\n\n");
    s += &ctx.provenance();
    let _ = writeln!(
        s,
        "traffic_server under `valgrind --tool=callgrind` (same records as the load bench, plus \
         periodic records/stats syncs pushed out to once an hour; the cache's AIO threads, idle \
         in both workloads, not counted), all rules in one process, each a path prefix (`/v00/`, `/v01/`, …) of one Host so that \
         the remap lookup costs the same for all. Per configuration and repetition: one \
         keep-alive connection, {} warm-up requests, counters zeroed, **{} requests one after \
         the other** (each checked: 200 with nginx's body; proxied ones reached nginx exactly \
         once each), {} ms to let the last transaction close, dump. Ir = instructions executed \
         by the whole process (all threads) in that window, divided by the requests. {} \
         repetitions, the configuration order rotating. With no request at all the process \
         executes {} Ir/s (timers), about {} Ir per request at this pace: already in every \
         figure, and the same in all. **added** = the configuration minus the no-plugin rule \
         of the same repetition; **over floor** = added minus the floor's (a C remap plugin \
         doing the least a concurrency limiter must: an atomic add at remap, a TXN_CLOSE \
         hook, an atomic sub and a re-enable at close; `bench/floor/floor.c`). The split \
         of added (means over repetitions): **own code** in the \
         plugin's object, **TS API** calls it makes (inclusive; `TSHttpTxnReenable` own \
         instructions only), **runtime** calls it makes (`__tls_get_addr`, malloc/free, \
         clock, libstdc++), **ATS** = the rest (remap plugin call, hook registration and \
         callouts, re-enabling).\n",
        a.warmup,
        a.requests,
        crate::icount::SETTLE.as_millis(),
        a.reps,
        int(r.idle_per_s, false),
        int(r.idle_per_s * mean_wall_per_request(r), false),
    );
    for w in WORKLOADS {
        let _ = writeln!(s, "### {} (`GET {}`)\n", w.title(), w.path());
        let reps_hdr: String = (1..=a.reps).map(|i| format!(" rep {i} |")).collect();
        let _ = writeln!(
            s,
            "| configuration | Ir/request |{reps_hdr} spread | added | over floor | added, min–max | own code | TS API | runtime | ATS |"
        );
        let _ = writeln!(
            s,
            "|---|--:|{}--:|--:|--:|--:|--:|--:|--:|--:|",
            "--:|".repeat(a.reps)
        );
        let floor = r
            .variants
            .iter()
            .position(|v| v.key == "floor")
            .map(|fi| mean(&row(r, fi, w).added));
        for (vi, v) in r.variants.iter().enumerate() {
            let x = row(r, vi, w);
            let m = mean(&x.reps);
            let lo = x.reps.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = x.reps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let reps: String = x
                .reps
                .iter()
                .map(|v| format!(" {} |", int(*v, false)))
                .collect();
            let spread = format!("{:.2} %", (hi - lo) / m * 100.0);
            if vi == 0 {
                let _ = writeln!(
                    s,
                    "| {} | {} |{reps} {spread} | — | — | — | — | — | — | — |",
                    v.label,
                    int(m, false)
                );
                continue;
            }
            let added = mean(&x.added);
            let amin = x.added.iter().copied().fold(f64::INFINITY, f64::min);
            let amax = x.added.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sh = &x.share;
            let ats = added - sh.own - sh.api - sh.runtime;
            let over = match floor {
                Some(_) if v.key == "floor" => "—".to_owned(),
                Some(f) => int(added - f, true),
                None => "—".to_owned(),
            };
            let _ = writeln!(
                s,
                "| {} | {} |{reps} {spread} | **{}** | {over} | {} – {} | {} | {} | {} | {} |",
                v.label,
                int(m, false),
                int(added, true),
                int(amin, true),
                int(amax, true),
                int(sh.own, false),
                int(sh.api, false),
                int(sh.runtime, false),
                int(ats, true),
            );
        }
        s.push('\n');
        if let Some(line) = versus(r, w) {
            s += &line;
        }
    }
    for (vi, v) in r.variants.iter().enumerate() {
        if r.objects[vi].is_empty() {
            continue;
        }
        s += &detail(r, vi, &v.label.replace('`', ""));
    }
    s
}

/// Configurations read against another (key, against): a learned limit
/// (`--limit=auto`) against the same rule with a fixed `--limit` (issue
/// 34's goal: at most 5 % more).
const VERSUS: &[(&str, &str)] = &[("auto", "ours")];

/// What each configuration of [`VERSUS`] adds over the one it is read
/// against, per repetition, and how many of its requests it looked at.
fn versus(r: &Results, w: Workload) -> Option<String> {
    let mut s = String::new();
    for (key, against) in VERSUS {
        let find = |k: &str| r.variants.iter().position(|v| v.key == k);
        let (Some(vi), Some(ai)) = (find(key), find(against)) else {
            continue;
        };
        let (mine, base) = (row(r, vi, w), row(r, ai, w));
        let diff: Vec<f64> = mine
            .reps
            .iter()
            .zip(&base.reps)
            .map(|(a, b)| a - b)
            .collect();
        let d = mean(&diff);
        let lo = diff.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = diff.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pct = d / mean(&base.added) * 100.0;
        // A transaction it looks at reads two milestones (a cache hit's
        // tell it none went to the origin); one it skips reads none.
        // (10.x's API has C++ linkage: callgrind names its parameters.)
        let examined = mine
            .share
            .api_calls
            .iter()
            .filter(|(name, _)| name.split('(').next() == Some("TSHttpTxnMilestoneGet"))
            .map(|(_, (calls, _))| calls / 2.0)
            .sum::<f64>();
        let _ = writeln!(
            s,
            "**{} over {}** (its Ir/request minus theirs, per repetition): **{}** \
             ({:+.1} % of what {} adds), {} – {}. It looked at {:.0} % of these requests \
             (its `TSHttpTxnMilestoneGet` calls ÷ 2), the others cost it the question alone.\n",
            r.variants[vi].label,
            r.variants[ai].label,
            int(d, true),
            pct,
            r.variants[ai].label,
            int(lo, true),
            int(hi, true),
            examined * 100.0,
        );
    }
    (!s.is_empty()).then_some(s)
}

fn mean_wall_per_request(r: &Results) -> f64 {
    let n: u64 = r.windows.iter().map(|w| w.requests).sum();
    r.windows.iter().map(|w| w.wall_s).sum::<f64>() / n.max(1) as f64
}

/// Where one plugin's instructions go, both workloads side by side.
fn detail(r: &Results, vi: usize, label: &str) -> String {
    let rows: Vec<Row> = WORKLOADS.iter().map(|&w| row(r, vi, w)).collect();
    let mut s = format!(
        "### Where {label} spends them\n\nPer request, means over repetitions (hit / proxied). \
         Calls per request in brackets.\n\n| | function | hit | proxied |\n|---|---|--:|--:|\n"
    );
    let cell = |x: Option<&f64>| x.map_or("—".to_owned(), |v| int(*v, false));
    let call_cell = |x: Option<&(f64, f64)>| {
        x.map_or("—".to_owned(), |(c, ir)| {
            format!("{} ({c:.1})", int(*ir, false))
        })
    };
    // Own code: the largest functions, the rest summed.
    let mut own: Vec<(&String, f64)> = rows[0]
        .share
        .own_fns
        .iter()
        .map(|(k, v)| (k, v + rows[1].share.own_fns.get(k).copied().unwrap_or(0.0)))
        .collect();
    for k in rows[1].share.own_fns.keys() {
        if !rows[0].share.own_fns.contains_key(k) {
            own.push((k, rows[1].share.own_fns[k]));
        }
    }
    own.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown = 10;
    for (name, _) in own.iter().take(shown) {
        let _ = writeln!(
            s,
            "| own code | {} | {} | {} |",
            display(name),
            cell(rows[0].share.own_fns.get(*name)),
            cell(rows[1].share.own_fns.get(*name))
        );
    }
    if own.len() > shown {
        let rest = |i: usize| -> f64 {
            own.iter()
                .skip(shown)
                .map(|(k, _)| rows[i].share.own_fns.get(*k).copied().unwrap_or(0.0))
                .sum()
        };
        let _ = writeln!(
            s,
            "| own code | {} other functions | {} | {} |",
            own.len() - shown,
            int(rest(0), false),
            int(rest(1), false)
        );
    }
    for (group, pick) in [("TS API", 0usize), ("runtime", 1usize)] {
        let maps = |i: usize| {
            if pick == 0 {
                &rows[i].share.api_calls
            } else {
                &rows[i].share.runtime_calls
            }
        };
        let mut names: Vec<&String> = maps(0).keys().chain(maps(1).keys()).collect();
        names.sort();
        names.dedup();
        names.sort_by(|a, b| {
            let v = |n: &String| {
                maps(0).get(n).map_or(0.0, |x| x.1) + maps(1).get(n).map_or(0.0, |x| x.1)
            };
            v(b).total_cmp(&v(a))
        });
        for name in names {
            let small = |i: usize| {
                maps(i)
                    .get(name)
                    .is_none_or(|(c, ir)| *c < 0.05 && *ir < 0.5)
            };
            if small(0) && small(1) {
                continue;
            }
            let _ = writeln!(
                s,
                "| {group} | {} | {} | {} |",
                display(name),
                call_cell(maps(0).get(name)),
                call_cell(maps(1).get(name))
            );
        }
    }
    let entries: Vec<String> = rows[0]
        .share
        .entries
        .iter()
        .filter(|(_, c)| **c >= 0.05)
        .map(|(k, c)| format!("{} {c:.1}", display(k)))
        .collect();
    let _ = writeln!(
        s,
        "\nEntries into the plugin per cache hit: {}.\n",
        entries.join(", ")
    );
    for (wi, &w) in WORKLOADS.iter().enumerate() {
        let fns = machinery_fns(r, vi, w, 8);
        let list: Vec<String> = fns
            .iter()
            .map(|(f, d)| {
                format!(
                    "{} ({}) +{}",
                    display(&f.name),
                    short(&f.object),
                    int(*d, false)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "Largest increases in ATS's own functions, {} (traffic_server and libtscore; own \
             instructions per request against no plugin, without the TS API functions \
             above): {}.\n",
            if wi == 0 { "hit" } else { "proxied" },
            list.join(", ")
        );
    }
    s
}
