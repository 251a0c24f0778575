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
mod tests;
