//! `ats-bench micro-icount`'s section of BENCHMARKS.md: instructions per
//! operation beside the baseline file's.
//!
//! The baseline column is read from the file when the section is written
//! (after `--write`, so it shows what the file then holds) and its header
//! names that file. [`check`] reads both back: `ats-bench check-sections`,
//! run first by `ci/bench.sh --smoke`, fails when a row and the file
//! disagree. [`refresh`] rewrites that column alone from the file
//! (`micro-icount --baseline-only`), for a baseline changed without
//! rerunning the measurement; the header line then says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::report::Context;

/// The section's name in its markers.
pub const NAME: &str = "micro-icount";

/// The table's header up to the baseline file's path.
const HEADER: &str = "| operation | instructions | baseline (`";
const HEADER_END: &str = "`) |";
const RULE: &str = "|---|--:|--:|";
/// Starts what [`refresh`] appends to the header line.
const REFRESH_NOTE: &str = " Baseline column re-read from ";

/// The baseline column's cell for `id`: the file's count, or "—".
fn cell(base: &BTreeMap<String, f64>, id: &str) -> String {
    base.get(id).map_or("—".into(), |b| format!("{b:.1}"))
}

/// The table: every measured operation, then those only the baseline has.
fn table(counts: &[(String, String)], base: &BTreeMap<String, f64>, base_path: &str) -> String {
    let mut s = format!("{HEADER}{base_path}{HEADER_END}\n{RULE}\n");
    for (id, v) in counts {
        let _ = writeln!(s, "| `{id}` | {v} | {} |", cell(base, id));
    }
    for (id, b) in base {
        if !counts.iter().any(|(c, _)| c == id) {
            let _ = writeln!(s, "| `{id}` | — | {b:.1} |");
        }
    }
    s
}

/// The section for this run's `counts`, beside `base` as read from
/// `base_path` (relative to the markdown file's directory).
pub fn section(
    counts: &[(String, f64)],
    base: &BTreeMap<String, f64>,
    base_path: &str,
    ctx: &Context,
) -> String {
    let mut s = String::from("## Micro-benchmarks: instructions per operation (callgrind)\n\n");
    s += &ctx.provenance();
    s += "The criterion benchmarks' single-thread operations, each run 10 000 times in its own \
          function of `bench/micro-icount` under callgrind; inclusive instructions of that \
          function / 10 000 (`ats-bench micro-icount`, ~2 s). Keyed tables hold 100 000 keys \
          (at their bound) instead of 1 M: same instructions, fewer to fill. \
          `ci/bench.sh --smoke` compares these with `bench/micro-icount/baseline.tsv` and fails \
          above +5 % and +8 instructions. The baseline column is the file its header names, \
          read when this section was written; `ci/bench.sh --smoke` also fails if the two \
          disagree.\n\n";
    let counts: Vec<(String, String)> = counts
        .iter()
        .map(|(id, v)| (id.clone(), format!("{v:.1}")))
        .collect();
    s + &table(&counts, base, base_path)
}

/// One row as the section states it.
struct Row<'a> {
    id: &'a str,
    count: &'a str,
    baseline: &'a str,
}

/// The table of a section's `body`: the file its header names, its rows,
/// and the lines it spans.
struct Table<'a> {
    /// None in a table written before its header named the file.
    path: Option<&'a str>,
    rows: Vec<Row<'a>>,
    lines: std::ops::Range<usize>,
}

fn parse(body: &str) -> Result<Table<'_>, String> {
    let lines: Vec<&str> = body.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("| operation |"))
        .ok_or("no table (a line starting with '| operation |')")?;
    let path = lines[start]
        .strip_prefix(HEADER)
        .and_then(|r| r.strip_suffix(HEADER_END));
    let mut rows = Vec::new();
    let mut end = start + 1;
    while let Some(line) = lines.get(end).filter(|l| l.starts_with('|')) {
        end += 1;
        if *line == RULE {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, id, count, baseline, _] = cells[..] else {
            return Err(format!("a row without three cells: '{line}'"));
        };
        rows.push(Row {
            id: id.trim_matches('`'),
            count,
            baseline,
        });
    }
    Ok(Table {
        path,
        rows,
        lines: start..end,
    })
}

/// Where the section's baseline column disagrees with the file its header
/// names (relative to `root`), one message per row naming both values; or,
/// if all agree, what was checked.
pub fn check(body: &str, root: &Path) -> Result<String, Vec<String>> {
    let t = parse(body).map_err(|e| vec![format!("section {NAME}: {e}")])?;
    let path = t.path.ok_or_else(|| {
        vec![format!(
            "section {NAME}: the table's header does not name the file its baseline column \
             shows (\"{HEADER}FILE{HEADER_END}\")"
        )]
    })?;
    let base = crate::micro_icount::read_baseline(&root.join(path)).map_err(|e| {
        vec![format!(
            "section {NAME}: the file its baseline column shows: {e}"
        )]
    })?;
    let mut problems = Vec::new();
    for r in &t.rows {
        let file = cell(&base, r.id);
        if r.baseline != file {
            let file = if file == "—" {
                "nothing (no such operation)".to_owned()
            } else {
                file
            };
            problems.push(format!(
                "section {NAME}, row `{}`: the baseline column says {}, {path} says {file}",
                r.id, r.baseline
            ));
        }
    }
    for (id, b) in &base {
        if !t.rows.iter().any(|r| r.id == id) {
            problems.push(format!(
                "section {NAME}, row `{id}`: the table has no such row, {path} says {b:.1}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "baseline column agrees with {path} ({} rows)",
            t.rows.len()
        ))
    } else {
        Err(problems)
    }
}

/// The section's `body` with its baseline column (and the path in its
/// header) rewritten from `base`, read from `base_path`; the instructions
/// column stays as measured. `note` goes at the end of the header line (the
/// `_Generated by …_` line), in place of an earlier refresh's.
pub fn refresh(
    body: &str,
    base: &BTreeMap<String, f64>,
    base_path: &str,
    note: &str,
) -> Result<String, String> {
    let t = parse(body).map_err(|e| format!("section {NAME}: {e}"))?;
    let counts: Vec<(String, String)> = t
        .rows
        .iter()
        .filter(|r| r.count != "—")
        .map(|r| (r.id.to_owned(), r.count.to_owned()))
        .collect();
    let mut out = String::new();
    for (i, line) in body.lines().enumerate() {
        if t.lines.contains(&i) {
            if i == t.lines.start {
                out += &table(&counts, base, base_path);
            }
        } else if line.starts_with("_Generated by") && line.ends_with('_') {
            let kept = line.split(REFRESH_NOTE).next().unwrap_or(line);
            let kept = kept.strip_suffix('_').unwrap_or(kept);
            let _ = writeln!(out, "{kept}{REFRESH_NOTE}{note}_");
        } else {
            out += line;
            out.push('\n');
        }
    }
    Ok(out)
}

/// What [`refresh`] says of itself: the file, its state, the date.
pub fn refresh_note(base_path: &str, state: &str, date: &str) -> String {
    format!(
        "`{base_path}` ({state}) on {date} by `ats-bench micro-icount --baseline-only`; \
         the instructions column is still the run this line describes."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# comment\nslots/acquire_release\t28.0\nthrottle/params_parse\t3129.0\n";

    fn body(baseline: &str) -> String {
        format!(
            "## Micro-benchmarks\n\n_Generated by `ats-bench` on then. Command: `x`._\n\ntext\n\n\
             {HEADER}bench/base.tsv{HEADER_END}\n{RULE}\n\
             | `slots/acquire_release` | 28.0 | 28.0 |\n\
             | `throttle/params_parse` | 3129.0 | {baseline} |\n"
        )
    }

    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("bench")).expect("mkdir");
        std::fs::write(dir.path().join("bench/base.tsv"), FILE).expect("write");
        dir
    }

    #[test]
    fn a_baseline_cell_that_differs_from_the_file_names_section_row_and_both_values() {
        let dir = root();
        assert_eq!(
            check(&body("3129.0"), dir.path()),
            Ok("baseline column agrees with bench/base.tsv (2 rows)".into())
        );
        assert_eq!(
            check(&body("3049.0"), dir.path()),
            Err(vec![
                "section micro-icount, row `throttle/params_parse`: the baseline column says \
                 3049.0, bench/base.tsv says 3129.0"
                    .into()
            ])
        );
        let missing = body("3129.0").replace("| `slots/acquire_release` | 28.0 | 28.0 |\n", "");
        assert!(check(&missing, dir.path()).unwrap_err()[0]
            .contains("row `slots/acquire_release`: the table has no such row"));
        let unnamed = body("3129.0").replace(&format!(" (`bench/base.tsv{HEADER_END}"), " |");
        assert!(check(&unnamed, dir.path()).unwrap_err()[0].contains("does not name"));
        let elsewhere = body("3129.0").replace("bench/base.tsv", "nope.tsv");
        assert!(check(&elsewhere, dir.path()).unwrap_err()[0].contains("nope.tsv"));
    }

    #[test]
    fn refresh_rewrites_the_baseline_column_only_and_says_so() {
        let dir = root();
        let base =
            crate::micro_icount::read_baseline(&dir.path().join("bench/base.tsv")).expect("read");
        let note = refresh_note("bench/base.tsv", "as of commit abc1234", "today");
        let fixed = refresh(&body("3049.0"), &base, "bench/base.tsv", &note).expect("refresh");
        assert_eq!(
            fixed,
            body("3129.0").replace("`x`._", &format!("`x`.{REFRESH_NOTE}{note}_"))
        );
        assert!(check(&fixed, dir.path()).is_ok());
        // A second refresh replaces the first one's note.
        assert_eq!(
            refresh(&fixed, &base, "bench/base.tsv", &note),
            Ok(fixed.clone())
        );
        // A table whose header did not name its file yet gets it.
        let old = body("3049.0").replace(&format!(" (`bench/base.tsv{HEADER_END}"), " |");
        assert_eq!(refresh(&old, &base, "bench/base.tsv", &note), Ok(fixed));
    }

    #[test]
    fn a_generated_section_agrees_with_its_file() {
        let dir = root();
        let base =
            crate::micro_icount::read_baseline(&dir.path().join("bench/base.tsv")).expect("read");
        let machine = crate::sys::Machine {
            date: "today".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            kernel: "linux".into(),
            loadavg: "0".into(),
            ats: "ats".into(),
            ats_install: "none".into(),
            wrk: "wrk".into(),
            nginx: "nginx".into(),
            source: "commit abc1234".into(),
        };
        let ctx = Context {
            machine: &machine,
            command: "test".into(),
        };
        // A new operation and one only the baseline has.
        let counts = vec![
            ("slots/acquire_release".to_owned(), 28.0),
            ("new/op".to_owned(), 5.0),
        ];
        let s = section(&counts, &base, "bench/base.tsv", &ctx);
        assert!(s.contains("| `new/op` | 5.0 | — |\n| `throttle/params_parse` | — | 3129.0 |\n"));
        assert_eq!(
            check(&s, dir.path()),
            Ok("baseline column agrees with bench/base.tsv (3 rows)".into())
        );
        let wrong = s.replace("| `new/op` | 5.0 | — |", "| `new/op` | 5.0 | 5.0 |");
        assert_eq!(
            check(&wrong, dir.path()),
            Err(vec![
                "section micro-icount, row `new/op`: the baseline column says 5.0, bench/base.tsv \
                 says nothing (no such operation)"
                    .into()
            ])
        );
    }
}
