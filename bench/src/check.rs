//! `ats-bench check-sections`: what the generated sections of BENCHMARKS.md
//! say about this tree, checked without running a bench (well under a
//! second; `ci/bench.sh --smoke` runs it first).
//!
//! - Each section's header line names the commit the plugins were built
//!   from ("our plugins from commit X"): X must be a commit of this
//!   repository and an ancestor of HEAD (not checked outside a git checkout
//!   or in a shallow clone). How many commits to the plugins' sources came
//!   after it is printed, not judged: a section is regenerated when its
//!   figures are due, not on every commit.
//! - The micro-icount section's baseline column must show the file its
//!   header names, row for row (`micro_icount_report::check`).
//!
//! The other sections cite no file of the tree (the criterion table's
//! `target/criterion` is a build output, not committed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::micro_icount_report;
use crate::sections;
use crate::sys::{self, PLUGIN_SOURCES, WORKSPACE};

pub const USAGE: &str = "\
usage: ats-bench check-sections [--root DIR] [FILE]

Checks what the generated sections of FILE (default: this workspace's
BENCHMARKS.md) cite: each plugin commit is in this repository's history, and
the micro-icount section's baseline column equals the file it names. Runs no
bench; fails (exit 1) naming the section, the row and both values.

  --root DIR   where cited paths and commits are looked up (default: FILE's directory)
";

struct Args {
    file: PathBuf,
    root: Option<PathBuf>,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut file = None;
    let mut root = None;
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--root" => root = Some(PathBuf::from(it.next().ok_or("--root needs a value")?)),
            "-h" | "--help" => return Err(String::new()),
            a if a.starts_with('-') => return Err(format!("unknown argument '{a}'")),
            a if file.is_none() => file = Some(PathBuf::from(a)),
            a => return Err(format!("one FILE only ('{a}')")),
        }
    }
    Ok(Args {
        file: file.unwrap_or_else(|| Path::new(WORKSPACE).join("BENCHMARKS.md")),
        root,
    })
}

/// The git history the commits are looked up in.
enum History {
    Full,
    Missing(&'static str),
}

fn history(root: &Path) -> History {
    match sys::git(root, &["rev-parse", "--is-shallow-repository"]).as_deref() {
        Some("false") => History::Full,
        Some(_) => History::Missing("a shallow clone"),
        None => History::Missing("not a git checkout"),
    }
}

/// The commit a section's header line says the plugins were built from.
fn commit_claim(body: &str) -> Option<&str> {
    let rest = body.split_once("our plugins from commit ")?.1;
    let end = rest
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(rest.len());
    (end >= 7).then(|| &rest[..end])
}

/// What a section's commit claim comes to: a note, or a problem.
fn check_commit(name: &str, body: &str, root: &Path, hist: &History) -> Result<String, String> {
    let Some(c) = commit_claim(body) else {
        return Ok("names no plugin commit".into());
    };
    if let History::Missing(why) = hist {
        return Ok(format!("plugins from commit {c} (not looked up: {why})"));
    }
    if sys::git(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{c}^{{commit}}"),
        ],
    )
    .is_none()
    {
        return Err(format!(
            "section {name}: says our plugins are from commit {c}, which this repository does not have"
        ));
    }
    if sys::git(root, &["merge-base", "--is-ancestor", c, "HEAD"]).is_none() {
        return Err(format!(
            "section {name}: says our plugins are from commit {c}, which is not an ancestor of HEAD"
        ));
    }
    let range = format!("{c}..HEAD");
    let since = sys::git(
        root,
        &[&["rev-list", "--count", &range, "--"], PLUGIN_SOURCES].concat(),
    )
    .unwrap_or_else(|| "?".into());
    Ok(format!(
        "plugins from commit {c} ({since} commits to {} since)",
        PLUGIN_SOURCES.join(", ")
    ))
}

/// One line per section saying what was checked, and every problem found.
pub fn check(text: &str, root: &Path) -> (Vec<String>, Vec<String>) {
    let (mut notes, mut problems) = (Vec::new(), Vec::new());
    let found = match sections::all(text) {
        Ok(s) => s,
        Err(e) => return (notes, vec![e]),
    };
    let hist = history(root);
    for (name, body) in found {
        let mut said = Vec::new();
        match check_commit(name, body, root, &hist) {
            Ok(note) => said.push(note),
            Err(p) => problems.push(p),
        }
        if name == micro_icount_report::NAME {
            match micro_icount_report::check(body, root) {
                Ok(note) => said.push(note),
                Err(p) => problems.extend(p),
            }
        }
        notes.push(format!("{name}: {}", said.join("; ")));
    }
    (notes, problems)
}

pub fn main(argv: &[String]) -> ExitCode {
    const CMD: &str = "ats-bench check-sections";
    let args = match crate::report::args_or_exit(CMD, USAGE, parse_args(argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let text = match std::fs::read_to_string(&args.file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{CMD}: {}: {e}", args.file.display());
            return ExitCode::FAILURE;
        }
    };
    let root = args.root.unwrap_or_else(|| match args.file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    });
    let (notes, problems) = check(&text, &root);
    println!("{CMD}: {}", args.file.display());
    for n in &notes {
        println!("  {n}");
    }
    for p in &problems {
        eprintln!("{}: {p}", args.file.display());
    }
    if problems.is_empty() {
        println!(
            "{CMD}: all {} generated sections agree with what they cite",
            notes.len()
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{CMD}: {} disagreement(s) in {}: rerun what writes the section (ci/bench.sh; \
             BENCHMARKS.md lists the commands), or, for the micro-icount baseline column alone, \
             `cargo run --release -p ats-bench -- micro-icount --baseline-only --out {}`",
            problems.len(),
            args.file.display(),
            args.file.display()
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_commit_a_header_line_names() {
        let line = "_Generated … our plugins from commit 75385be. Command: …_";
        assert_eq!(commit_claim(line), Some("75385be"));
        let dirty = "our plugins from commit fe69ba6 with uncommitted changes to Cargo.lock.";
        assert_eq!(commit_claim(dirty), Some("fe69ba6"));
        assert_eq!(
            commit_claim("our plugins from unknown (not a git checkout)."),
            None
        );
    }

    #[test]
    fn a_section_that_disagrees_with_its_file_fails_the_check() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("base.tsv"), "a/b\t28.0\n").expect("write");
        let section = |v: &str| {
            sections::splice(
                "# B\n\n",
                &[(
                    micro_icount_report::NAME,
                    format!(
                        "_Generated by `ats-bench` on then; our plugins from unknown._\n\n\
                         | operation | instructions | baseline (`base.tsv`) |\n|---|--:|--:|\n\
                         | `a/b` | 28.0 | {v} |\n"
                    ),
                )],
            )
        };
        let (notes, problems) = check(&section("28.0"), dir.path());
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(
            notes,
            ["micro-icount: names no plugin commit; baseline column agrees with base.tsv (1 rows)"]
        );
        let (_, problems) = check(&section("29.0"), dir.path());
        assert_eq!(
            problems,
            ["section micro-icount, row `a/b`: the baseline column says 29.0, base.tsv says 28.0"]
        );
    }
}
