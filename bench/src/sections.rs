//! The generated sections of a markdown file (BENCHMARKS.md). Each sits
//! between marker comments, so a rerun replaces exactly its own sections
//! and leaves the hand-written text (and sections it did not rerun) alone.

use std::fs;
use std::path::Path;

/// Prints a generated section and, with `out`, writes it into that file
/// under `name`.
pub fn publish(cmd: &str, name: &str, body: String, out: Option<&Path>) -> std::process::ExitCode {
    println!("{body}");
    if let Some(out) = out {
        if let Err(e) = update(out, &[(name, body)]) {
            eprintln!("{cmd}: {e}");
            return std::process::ExitCode::FAILURE;
        }
        eprintln!("updated {}", out.display());
    }
    std::process::ExitCode::SUCCESS
}

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- ats-bench:{name}:begin (generated; rerun ci/bench.sh to update) -->"),
        format!("<!-- ats-bench:{name}:end -->"),
    )
}

/// Replaces each named section of `text` (between its markers) with new
/// content, appending sections that are not there yet.
pub fn splice(text: &str, sections: &[(&str, String)]) -> String {
    let mut out = text.to_owned();
    for (name, body) in sections {
        let (begin, end) = markers(name);
        let block = format!("{begin}\n{body}{end}");
        match (out.find(&begin), out.find(&end)) {
            (Some(b), Some(e)) if e > b => out.replace_range(b..e + end.len(), &block),
            _ => {
                if !out.is_empty() && !out.ends_with("\n\n") {
                    out.push_str(if out.ends_with('\n') { "\n" } else { "\n\n" });
                }
                out.push_str(&block);
                out.push('\n');
            }
        }
    }
    out
}

/// What [`splice`] put between `name`'s markers, if `text` has them.
pub fn body<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let (begin, end) = markers(name);
    let b = text.find(&begin)? + begin.len();
    let e = b + text[b..].find(&end)?;
    Some(text[b..e].strip_prefix('\n').unwrap_or(&text[b..e]))
}

/// Every generated section of `text` in order, as (name, body); an error
/// for a begin marker without its end marker.
pub fn all(text: &str) -> Result<Vec<(&str, &str)>, String> {
    const OPEN: &str = "<!-- ats-bench:";
    let mut out = Vec::new();
    for (i, _) in text.match_indices(OPEN) {
        let rest = &text[i + OPEN.len()..];
        let name = rest.split(':').next().unwrap_or_default();
        if !rest[name.len()..].starts_with(":begin") {
            continue;
        }
        let body = body(text, name)
            .ok_or_else(|| format!("section {name}: no end marker after its begin marker"))?;
        out.push((name, body));
    }
    Ok(out)
}

/// Writes the sections into `path` (created with a title if missing).
pub fn update(path: &Path, sections: &[(&str, String)]) -> Result<(), String> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n\n".to_owned(),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    fs::write(path, splice(&text, sections)).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_its_own_sections() {
        let first = splice(
            "# B\n\nintro\n",
            &[("a", "one\n".into()), ("b", "two\n".into())],
        );
        assert!(first.starts_with("# B\n\nintro\n\n<!-- ats-bench:a:begin"));
        let edited = first.replace("intro", "intro, edited by hand");
        let second = splice(&edited, &[("a", "ONE\n".into())]);
        assert!(second.contains("intro, edited by hand"));
        assert!(second.contains("ONE\n<!-- ats-bench:a:end -->"));
        assert!(!second.contains("one\n"));
        assert!(second.contains("two\n<!-- ats-bench:b:end -->"));
        assert_eq!(splice(&second, &[("a", "ONE\n".into())]), second);
    }

    #[test]
    fn all_reads_back_what_splice_wrote() {
        let text = splice(
            "# B\n\nintro\n",
            &[("a", "one\n".into()), ("b-1.2", "two\nlines\n".into())],
        );
        assert_eq!(
            all(&text),
            Ok(vec![("a", "one\n"), ("b-1.2", "two\nlines\n")])
        );
        assert_eq!(body(&text, "b-1.2"), Some("two\nlines\n"));
        assert_eq!(body(&text, "c"), None);
        let cut = text.replace("<!-- ats-bench:b-1.2:end -->", "");
        assert!(all(&cut).unwrap_err().contains("section b-1.2"));
    }
}
