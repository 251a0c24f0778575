//! Reads callgrind's output format (one dump file, `Ir` events): the total,
//! each function's own cost, and what each function's calls cost inclusively
//! (with call counts), so a profile can be split by object (our plugin,
//! traffic_server, libc, ...). Handles name compression (`(id) name`).
//! Format: <https://valgrind.org/docs/manual/cl-format.html>.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A function: the ELF object it lives in and its (demangled) name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Func {
    pub object: String,
    pub name: String,
}

/// Calls from one function to another: how many, and their inclusive cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub count: u64,
    pub inclusive: u64,
}

#[derive(Debug, Default)]
pub struct Profile {
    /// Instructions executed in the dumped interval (`summary:`/`totals:`).
    pub total: u64,
    /// Why the dump was written (`desc: Trigger: ...`), e.g. the dump hint.
    pub trigger: String,
    /// Own cost of each function (inlined code included).
    pub self_cost: HashMap<Func, u64>,
    /// `(caller, callee)` -> calls.
    pub calls: HashMap<(Func, Func), Calls>,
}

/// Name tables of the compressed format: objects, files and functions are
/// three separate id spaces.
#[derive(Default)]
struct Names(HashMap<u64, String>);

impl Names {
    /// `(12) name` defines id 12, `(12)` refers to it, `name` is uncompressed.
    fn resolve(&mut self, v: &str) -> Result<String, String> {
        let v = v.trim();
        let Some(rest) = v.strip_prefix('(') else {
            return Ok(v.to_owned());
        };
        let (id, name) = rest
            .split_once(')')
            .ok_or_else(|| format!("bad compressed name '{v}'"))?;
        let id: u64 = id.parse().map_err(|_| format!("bad name id in '{v}'"))?;
        let name = name.trim();
        if name.is_empty() {
            self.0
                .get(&id)
                .cloned()
                .ok_or_else(|| format!("name id {id} used before its definition"))
        } else {
            self.0.insert(id, name.to_owned());
            Ok(name.to_owned())
        }
    }
}

/// `f'2` (callgrind's name for a recursive activation of `f`) -> `f`.
fn unrecursed(mut name: String) -> String {
    if let Some(i) = name.rfind('\'') {
        if i + 1 < name.len() && name[i + 1..].bytes().all(|b| b.is_ascii_digit()) {
            name.truncate(i);
        }
    }
    name
}

impl Profile {
    pub fn parse(text: &str) -> Result<Profile, String> {
        let mut p = Profile::default();
        let (mut objects, mut files, mut fns) =
            (Names::default(), Names::default(), Names::default());
        let mut positions = 1usize;
        let mut ir_column: Option<usize> = None;
        let mut ob = String::new();
        let mut current: Option<Func> = None;
        // The callee named by cob=/cfn= for the next calls= line.
        let (mut cob, mut cfn): (Option<String>, Option<String>) = (None, None);
        // After calls=: the next cost line is that call's inclusive cost.
        let mut pending: Option<(Func, u64)> = None;
        for (n, line) in text.lines().enumerate() {
            let err = |e: String| format!("line {}: {e}", n + 1);
            let first = line.as_bytes().first().copied();
            if matches!(first, Some(b'0'..=b'9' | b'+' | b'-' | b'*')) {
                let ir: u64 = match ir_column {
                    Some(col) => line
                        .split_whitespace()
                        .nth(positions + col)
                        .map_or(Ok(0), |v| v.parse())
                        .map_err(|_| err(format!("bad cost line '{line}'")))?,
                    None => 0,
                };
                let f = current
                    .clone()
                    .ok_or_else(|| err("cost before any fn=".into()))?;
                match pending.take() {
                    Some((callee, count)) => {
                        let c = p.calls.entry((f, callee)).or_default();
                        c.count += count;
                        c.inclusive += ir;
                    }
                    None => *p.self_cost.entry(f).or_default() += ir,
                }
                continue;
            }
            let Some((key, value)) = line.split_once('=').filter(|(k, _)| !k.contains(' ')) else {
                if let Some(v) = line.strip_prefix("events:") {
                    ir_column = v.split_whitespace().position(|e| e == "Ir");
                } else if let Some(v) = line.strip_prefix("positions:") {
                    positions = v.split_whitespace().count();
                } else if let Some(v) = line
                    .strip_prefix("summary:")
                    .or_else(|| line.strip_prefix("totals:"))
                {
                    let col = ir_column.unwrap_or(0);
                    p.total = v
                        .split_whitespace()
                        .nth(col)
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| err(format!("bad total '{line}'")))?;
                } else if let Some(v) = line.strip_prefix("desc: Trigger:") {
                    p.trigger = v.trim().to_owned();
                }
                continue;
            };
            match key {
                "ob" => ob = objects.resolve(value).map_err(err)?,
                "fn" => {
                    current = Some(Func {
                        object: ob.clone(),
                        name: unrecursed(fns.resolve(value).map_err(err)?),
                    })
                }
                "cob" => cob = Some(objects.resolve(value).map_err(err)?),
                "cfi" | "cfl" | "fl" | "fi" | "fe" => {
                    files.resolve(value).map_err(err)?;
                }
                "cfn" => cfn = Some(fns.resolve(value).map_err(err)?),
                "calls" => {
                    let count = value
                        .split_whitespace()
                        .next()
                        .and_then(|c| c.parse().ok())
                        .ok_or_else(|| err(format!("bad calls line '{line}'")))?;
                    let name = unrecursed(
                        cfn.take()
                            .ok_or_else(|| err("calls= without cfn=".into()))?,
                    );
                    // Without cob= the callee is in the caller's object.
                    let object = cob.take().unwrap_or_else(|| ob.clone());
                    pending = Some((Func { object, name }, count));
                }
                _ => {}
            }
        }
        if p.total == 0 {
            p.total = p.self_cost.values().sum();
        }
        Ok(p)
    }
}

impl Profile {
    /// Inclusive cost of the functions whose name `matches`: their own
    /// cost and their calls to functions that do not match. For a thread's
    /// main loop (entered before the dump interval, never left) that is all
    /// the thread executed.
    pub fn inclusive(&self, matches: impl Fn(&str) -> bool) -> u64 {
        let own: u64 = self
            .self_cost
            .iter()
            .filter(|(f, _)| matches(&f.name))
            .map(|(_, c)| c)
            .sum();
        let calls: u64 = self
            .calls
            .iter()
            .filter(|((from, to), _)| matches(&from.name) && !matches(&to.name))
            .map(|(_, c)| c.inclusive)
            .sum();
        own + calls
    }
}

pub fn callgrind_control(pid: u32, args: &[&str]) -> Result<(), String> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("cannot run callgrind_control (install valgrind): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "callgrind_control {} {pid}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Where callgrind writes its dumps: `kept` (created, made absolute) when
/// the caller asked to keep them, else the run's temporary directory.
pub fn dump_dir(kept: Option<&Path>, tmp: &Path) -> Result<PathBuf, String> {
    match kept {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.canonicalize()
                .map_err(|e| format!("{}: {e}", d.display()))
        }
        None => Ok(tmp.to_path_buf()),
    }
}

/// The dump written for `hint` (callgrind numbers its dumps; the hint is in
/// the file's `desc: Trigger:` line).
pub fn take_dump(dir: &Path, hint: &str, keep: bool) -> Result<Profile, String> {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("callgrind.out."))
            })
            .collect();
        entries.sort();
        for p in entries {
            // Cheap check of the header before parsing the whole file.
            let head = std::fs::read_to_string(&p).unwrap_or_default();
            if head.contains(&format!("Trigger: Client Request: {hint}"))
                || head.contains(&format!("Trigger: Dump {hint}"))
                || head
                    .lines()
                    .any(|l| l.starts_with("desc: Trigger:") && l.ends_with(hint))
            {
                if !head.contains("\ntotals:") {
                    // Still being written.
                    break;
                }
                let profile = Profile::parse(&head).map_err(|e| format!("{}: {e}", p.display()))?;
                if keep {
                    std::fs::rename(&p, dir.join(format!("{hint}.callgrind"))).ok();
                } else {
                    std::fs::remove_file(&p).ok();
                }
                return Ok(profile);
            }
        }
        if Instant::now() > end {
            return Err(format!(
                "no callgrind dump for '{hint}' in {}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests;
