//! `ats-bench tls`'s markdown section: instructions per connection, where a
//! plugin's go, and the flood.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::args::Args;
use super::flood::FloodRun;
use super::icount::Results;
use super::setup::{Plugin, SNI};
use crate::attribution::{average, share, Share};
use crate::report::Context;
use crate::stats::median;

use crate::report::grouped as int;

/// −92.6 / +0.5, with a real minus sign as `int` writes it.
fn pct(x: f64) -> String {
    let s = format!("{:.1}", x.abs());
    if x < 0.0 && s != "0.0" {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

/// A name without its C++ parameter list, quoted for a table; a long C++
/// name also without its template arguments (`std::_Hashtable<…>::find`).
fn display(name: &str) -> String {
    let cut = match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    let short = if cut.len() > 80 && !cut.starts_with('<') {
        let mut out = String::new();
        let mut depth = 0usize;
        for ch in cut.chars() {
            match ch {
                '<' => {
                    if depth == 0 {
                        out.push_str("<…>");
                    }
                    depth += 1;
                }
                '>' => depth = depth.saturating_sub(1),
                c if depth == 0 => out.push(c),
                _ => {}
            }
        }
        out
    } else {
        cut.to_owned()
    };
    format!("`{}`", short.replace('|', "\\|"))
}

/// Per configuration: Ir per connection of each window, and the plugin's share.
struct Row {
    reps: Vec<f64>,
    share: Share,
    wall_ms: f64,
}

fn row(r: &Results, ci: usize) -> Row {
    let ws: Vec<_> = r.windows.iter().filter(|w| w.config == ci).collect();
    let shares: Vec<Share> = ws
        .iter()
        .map(|w| share(&w.profile, &r.objects[ci], w.conns))
        .collect();
    Row {
        reps: ws.iter().map(|w| w.ir as f64 / w.conns as f64).collect(),
        share: average(&shares),
        wall_ms: median(
            &ws.iter()
                .map(|w| w.wall_s * 1e3 / w.conns as f64)
                .collect::<Vec<_>>(),
        ),
    }
}

/// Instructions per connection by ELF object, medians over windows.
fn by_object(r: &Results, ci: usize) -> BTreeMap<String, f64> {
    let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let ws: Vec<_> = r.windows.iter().filter(|w| w.config == ci).collect();
    for w in &ws {
        let mut m: BTreeMap<String, f64> = BTreeMap::new();
        for (f, &ir) in &w.profile.self_cost {
            let short = f.object.rsplit('/').next().unwrap_or(&f.object);
            *m.entry(short.to_owned()).or_default() += ir as f64 / w.conns as f64;
        }
        for (k, v) in m {
            per.entry(k).or_default().push(v);
        }
    }
    per.into_iter().map(|(k, v)| (k, median(&v))).collect()
}

pub fn section(
    ctx: &Context,
    args: &Args,
    ic: Option<&Results>,
    floods: &[(Plugin, FloodRun)],
) -> String {
    let (major, minor) = ats_tests::ats::version();
    let mut s = format!(
        "## TLS connections at the client hello (global mode), Traffic Server {major}.{minor}\n\n"
    );
    s += &ctx.provenance();
    let _ = writeln!(
        s,
        "rate_limit.so in plugin.config with a YAML file (`rate_limit.so FILE.yaml`), one selector \
         for `{SNI}`. Every traffic_server: a TLS port (an ECDSA P-256 certificate), 2 exec \
         threads, debug output and logging off, session tickets off (a client closing while \
         tickets are in flight resets instead of closing: another path in ATS, whose count would \
         vary with timing). Clients: TLS 1.3 (X25519) from Python's `ssl`; the flooder replays a \
         recorded ClientHello.\n"
    );
    if let Some(r) = ic {
        s += &icount_part(args, r);
    }
    if !floods.is_empty() {
        s += &super::flood::section(args, floods);
    }
    s
}

fn icount_part(args: &Args, r: &Results) -> String {
    let mut s = String::from("### Instructions per TLS connection (callgrind)\n\n");
    let idle = median(&r.idle_per_s);
    let rows: Vec<Row> = (0..r.configs.len()).map(|ci| row(r, ci)).collect();
    let wall = median(&rows.iter().map(|x| x.wall_ms).collect::<Vec<_>>());
    let _ = writeln!(
        s,
        "traffic_server under `valgrind --tool=callgrind` (the records of `ats-bench icount`: \
         periodic syncs pushed out to once an hour, the cache's idle AIO threads not counted), \
         one traffic_server per configuration. Per configuration: {} warm-up connections in a \
         window of their own, thrown away (a process's first window with connections counts \
         ~3.5 M instructions more than the next ones, and more than its own callgrind summary \
         line says), then {} windows of **{} connections one after the other** from one client (counters zeroed, \
         the connections, {} ms to let the last one close, dump): each a full TLS 1.3 handshake \
         then a close, or, refused, a handshake failed at the client hello. Every outcome is \
         checked (accepted: all completed; refused: all failed). Ir = instructions of the whole \
         process in the window ÷ connections; the table gives the median window and each. \
         **vs no plugin** = medians' difference. **Plugin's share** (means over windows): \
         instructions in the plugin's own object, the TS API calls it makes (inclusive), and \
         other calls it makes (runtime: `__tls_get_addr`, malloc, clock, libstdc++); **ATS \
         (rest)**, for accepted connections: the rest of the difference (the hook callouts). With no \
         connection at all the process executes {} Ir/s (timers): at the pace under callgrind \
         (a median {:.0} ms per connection) about {} per connection, in every figure.\n",
        args.warmup,
        args.reps,
        args.connections,
        super::icount::SETTLE.as_millis(),
        int(idle, false),
        wall,
        int(idle * wall / 1e3, false),
    );
    let reps_hdr: String = (1..=args.reps).map(|i| format!(" rep {i} |")).collect();
    let _ = writeln!(
        s,
        "| configuration | Ir/connection |{reps_hdr} vs no plugin | own code | TS API | runtime | ATS (rest) | ms/connection under callgrind |"
    );
    let _ = writeln!(
        s,
        "|---|--:|{}--:|--:|--:|--:|--:|--:|",
        "--:|".repeat(args.reps)
    );
    let none = rows.first().map_or(f64::NAN, |x| median(&x.reps));
    for (ci, c) in r.configs.iter().enumerate() {
        let x = &rows[ci];
        let m = median(&x.reps);
        let reps: String = x
            .reps
            .iter()
            .map(|v| format!(" {} |", int(*v, false)))
            .collect();
        let dash = || "—".to_owned();
        let cells = if c.plugin == Plugin::None {
            [dash(), dash(), dash(), dash(), dash()]
        } else {
            let sh = &x.share;
            // What ATS runs for the plugin beyond the calls it makes (hook
            // callouts); for a refused connection the difference is the
            // handshake not done, so the rest means nothing.
            let rest = if c.refused {
                dash()
            } else {
                int(m - none - sh.own - sh.api - sh.runtime, true)
            };
            [
                format!(
                    "**{}** ({} %)",
                    int(m - none, true),
                    pct((m / none - 1.0) * 100.0)
                ),
                int(sh.own, false),
                int(sh.api, false),
                int(sh.runtime, false),
                rest,
            ]
        };
        let _ = writeln!(
            s,
            "| {} | {} |{reps} {} | {:.0} |",
            c.label(),
            int(m, false),
            cells.join(" | "),
            x.wall_ms
        );
    }
    s.push('\n');
    for (ci, c) in r.configs.iter().enumerate() {
        if c.refused && !r.failures[ci].is_empty() {
            let _ = writeln!(s, "- {}: the client saw {}.", c.label(), r.failures[ci]);
        }
    }
    s.push('\n');
    s += &objects_table(r);
    for p in [Plugin::Ours, Plugin::Upstream] {
        s += &detail(r, &rows, p);
    }
    s
}

/// Where each configuration's instructions go, by ELF object.
fn objects_table(r: &Results) -> String {
    let per: Vec<BTreeMap<String, f64>> = (0..r.configs.len()).map(|ci| by_object(r, ci)).collect();
    // The largest objects of any configuration (a refused handshake's
    // differ from an accepted one's).
    let mut names: Vec<(String, f64)> = Vec::new();
    for m in &per {
        for (k, v) in m {
            match names.iter_mut().find(|(n, _)| n == k) {
                Some((_, top)) => *top = top.max(*v),
                None => names.push((k.clone(), *v)),
            }
        }
    }
    names.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown: Vec<&String> = names.iter().take(6).map(|(n, _)| n).collect();
    let mut s = String::from(
        "By object, instructions per connection (medians over windows):\n\n| object |",
    );
    for c in &r.configs {
        let _ = write!(s, " {} |", c.label());
    }
    let _ = writeln!(s, "\n|---|{}", "--:|".repeat(r.configs.len()));
    for n in &shown {
        let _ = write!(s, "| `{n}` |");
        for m in &per {
            let _ = write!(
                s,
                " {} |",
                m.get(*n).map_or("—".to_owned(), |v| int(*v, false))
            );
        }
        s.push('\n');
    }
    let _ = write!(s, "| other |");
    for m in &per {
        let rest: f64 = m
            .iter()
            .filter(|(k, _)| !shown.contains(k))
            .map(|(_, v)| v)
            .sum();
        let _ = write!(s, " {} |", int(rest, false));
    }
    s + "\n\n"
}

/// One plugin's instructions, accepted and refused side by side.
fn detail(r: &Results, rows: &[Row], p: Plugin) -> String {
    let find = |refused: bool| {
        r.configs
            .iter()
            .position(|c| c.plugin == p && c.refused == refused)
    };
    let (Some(a), Some(b)) = (find(false), find(true)) else {
        return String::new();
    };
    let (sa, sb) = (&rows[a].share, &rows[b].share);
    let mut s = format!(
        "#### Where {} spends them\n\nPer connection, mean over windows (accepted / refused); calls per connection in brackets.\n\n\
         | | function | accepted | refused |\n|---|---|--:|--:|\n",
        p.label()
    );
    let mut own: Vec<(&String, f64)> = sa
        .own_fns
        .keys()
        .chain(sb.own_fns.keys())
        .map(|k| {
            (
                k,
                sa.own_fns.get(k).unwrap_or(&0.0) + sb.own_fns.get(k).unwrap_or(&0.0),
            )
        })
        .collect();
    own.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(y.0)));
    own.dedup_by(|x, y| x.0 == y.0);
    let cell = |v: Option<&f64>| v.map_or("—".to_owned(), |v| int(*v, false));
    for (name, _) in own.iter().take(8) {
        let _ = writeln!(
            s,
            "| own code | {} | {} | {} |",
            display(name),
            cell(sa.own_fns.get(*name)),
            cell(sb.own_fns.get(*name))
        );
    }
    if own.len() > 8 {
        let rest = |m: &BTreeMap<String, f64>| -> f64 {
            own.iter()
                .skip(8)
                .map(|(k, _)| m.get(*k).copied().unwrap_or(0.0))
                .sum()
        };
        let _ = writeln!(
            s,
            "| own code | {} other functions | {} | {} |",
            own.len() - 8,
            int(rest(&sa.own_fns), false),
            int(rest(&sb.own_fns), false)
        );
    }
    let call = |v: Option<&(f64, f64)>| {
        v.map_or("—".to_owned(), |(c, ir)| {
            format!("{} ({c:.1})", int(*ir, false))
        })
    };
    for (group, ma, mb) in [
        ("TS API", &sa.api_calls, &sb.api_calls),
        ("runtime", &sa.runtime_calls, &sb.runtime_calls),
    ] {
        let mut names: Vec<&String> = ma.keys().chain(mb.keys()).collect();
        names.sort();
        names.dedup();
        let total = |n: &String| ma.get(n).map_or(0.0, |x| x.1) + mb.get(n).map_or(0.0, |x| x.1);
        names.sort_by(|x, y| total(y).total_cmp(&total(x)));
        for n in names.into_iter().filter(|n| total(n) >= 0.5) {
            let _ = writeln!(
                s,
                "| {group} | {} | {} | {} |",
                display(n),
                call(ma.get(n)),
                call(mb.get(n))
            );
        }
    }
    let entries = |sh: &Share| -> String {
        let v: Vec<String> = sh
            .entries
            .iter()
            .filter(|(_, c)| **c >= 0.05)
            .map(|(k, c)| format!("{} {c:.1}", display(k)))
            .collect();
        v.join(", ")
    };
    let _ = writeln!(
        s,
        "\nEntries into the plugin per connection: accepted {}; refused {}.\n",
        entries(sa),
        entries(sb)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(int(-2505407.0, true), "−2,505,407");
        assert_eq!(int(14694.4, true), "+14,694");
        assert_eq!(pct(-92.64), "−92.6");
        assert_eq!(pct(0.54), "+0.5");
        assert_eq!(display("f(int)"), "`f`");
        let long = "std::_Hashtable<std::basic_string<char>, std::pair<std::basic_string<char> const, int>, std::equal_to<int> >::find(x)";
        assert_eq!(display(long), "`std::_Hashtable<…>::find`");
        let rust = "<rate_limit::global::Hello as ats::vconn::ClientHelloHandler>::on_client_hello";
        assert_eq!(display(rust), format!("`{rust}`"));
    }
}
