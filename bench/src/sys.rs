//! What the bench reads from the system: process CPU time from /proc, and
//! the facts about the machine that go into the report.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// User + system CPU seconds consumed so far by process `pid` (all threads).
pub fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let text = fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    let ticks = parse_stat_ticks(&text).ok_or_else(|| format!("unexpected format of {path}"))?;
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
}

/// CPU seconds this process and its waited-for children (wrk runs) have
/// used: utime + stime + cutime + cstime (fields 14–17).
pub fn own_and_children_cpu_seconds() -> Result<f64, String> {
    let text = fs::read_to_string("/proc/self/stat")
        .map_err(|e| format!("reading /proc/self/stat: {e}"))?;
    let ticks = parse_stat_fields(&text, 4).ok_or("unexpected format of /proc/self/stat")?;
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
}

/// Busy CPU seconds of the whole machine, all CPUs (/proc/stat's first
/// line: everything but idle and iowait).
pub fn machine_busy_seconds() -> Result<f64, String> {
    let text = fs::read_to_string("/proc/stat").map_err(|e| format!("reading /proc/stat: {e}"))?;
    let ticks = parse_machine_busy(&text).ok_or("unexpected format of /proc/stat")?;
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
}

/// user nice system idle iowait irq softirq steal: all but idle and iowait.
/// (guest time is already counted in user.)
fn parse_machine_busy(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() == 8).then(|| v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

/// Sum of `n` consecutive fields from field 14 (utime) of a /proc/<pid>/stat line.
fn parse_stat_fields(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is the 12th field of `rest`.
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(n)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() == n).then(|| fields.iter().sum())
}

/// utime + stime (fields 14 and 15, in clock ticks) of a /proc/<pid>/stat
/// line. The command name (field 2) may contain spaces and parentheses, so
/// fields are counted after its last ')'.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    parse_stat_fields(stat, 2)
}

/// Restricts every thread of `pid` to `cpus` (a taskset list, e.g. "0").
pub fn pin(pid: u32, cpus: &str) -> Result<(), String> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .map_err(|e| format!("cannot run taskset (util-linux): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset -a -p -c {cpus} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `getconf CLK_TCK`, read once; 100 (the Linux value) if getconf fails.
pub fn clock_ticks_per_second() -> u64 {
    static TCK: OnceLock<u64> = OnceLock::new();
    *TCK.get_or_init(|| {
        command_output("getconf", &["CLK_TCK"])
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// stdout (or, if empty, stderr) of a command, if it could be run at all.
pub fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    Some(String::from_utf8_lossy(&text).into_owned())
}

fn first_line(text: Option<String>) -> String {
    text.as_deref()
        .and_then(|t| t.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("unknown")
        .to_owned()
}

/// The machine and software a measurement was taken on.
#[derive(Clone, Debug)]
pub struct Machine {
    pub date: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub loadavg: String,
    pub ats: String,
    /// Where that Traffic Server comes from: "Debian package trafficserver
    /// VERSION", or "installed in PREFIX" under `ATS_PREFIX` (where the
    /// Debian package, if any, is not what runs).
    pub ats_install: String,
    pub wrk: String,
    pub nginx: String,
    /// The commit the plugins were built from, and any uncommitted changes
    /// to their sources (the harness builds them from the working tree).
    pub source: String,
}

/// The workspace this bench was built from.
pub const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// What `git -C dir ARGS` printed, if it succeeded (None outside a checkout).
pub fn git(dir: &Path, args: &[&str]) -> Option<String> {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        // Not trimmed at the start: porcelain lines begin with a status column.
        .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_owned())
}

/// The paths whose changes change the plugins (and so what a section measured).
pub const PLUGIN_SOURCES: &[&str] = &["ats-sys", "crates", "plugins", "Cargo.lock"];

/// "commit abc1234" plus the files under the plugins' source directories
/// that differ from it.
pub fn source_provenance() -> String {
    let git = |args: &[&str]| git(Path::new(WORKSPACE), args);
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown (not a git checkout)".into();
    };
    let dirty =
        git(&[&["status", "--porcelain", "--"], PLUGIN_SOURCES].concat()).unwrap_or_default();
    let files: Vec<&str> = dirty.lines().filter_map(|l| l.get(3..)).collect();
    if files.is_empty() {
        format!("commit {commit}")
    } else {
        format!(
            "commit {commit} with uncommitted changes to {}",
            files.join(", ")
        )
    }
}

/// "2026-11-29 14:05 UTC", the date every section's header line gives.
pub fn utc_now() -> String {
    first_line(command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]))
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let ats = first_line(command_output(
            &ats_tests::ats::bin("traffic_server").display().to_string(),
            &["--version"],
        ));
        Machine {
            date: utc_now(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel: first_line(fs::read_to_string("/proc/sys/kernel/osrelease").ok()),
            loadavg: fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".into()),
            // "Traffic Server 9.2.9 Apr  4 2026 ..." -> "Traffic Server 9.2.9"
            ats: ats.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            ats_install: match ats_tests::ats::prefix() {
                Some(p) => format!("installed in {}", p.display()),
                None => format!(
                    "Debian package trafficserver {}",
                    first_line(command_output(
                        "dpkg-query",
                        &["-W", "-f=${Version}", "trafficserver"],
                    ))
                ),
            },
            wrk: first_line(command_output("wrk", &["-v"]))
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
            nginx: first_line(command_output("nginx", &["-v"]))
                .trim_start_matches("nginx version: ")
                .to_owned(),
            source: source_provenance(),
        }
    }

    /// One line for section headers.
    pub fn short(&self) -> String {
        format!(
            "{} CPUs ({}), Linux {}",
            self.cpus, self.cpu_model, self.kernel
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_skip_a_command_name_with_spaces_and_parens() {
        let line = "1234 (traffic (srv) x) S 1 1234 1234 0 -1 4194560 5000 0 0 0 \
                    250 75 0 0 20 0 20 0 100 1000000 2000 18446744073709551615";
        assert_eq!(parse_stat_ticks(line), Some(325));
        assert_eq!(parse_stat_fields(line, 4), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 2 30 5000 40 1 7 3 0 0\ncpu0 50 1 15 2500 20 0 3 1 0 0\n";
        assert_eq!(parse_machine_busy(stat), Some(143));
        assert_eq!(parse_machine_busy("intr 1 2 3"), None);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(own_and_children_cpu_seconds().expect("own /proc entry") >= 0.0);
        assert!(machine_busy_seconds().expect("/proc/stat") > 0.0);
        let s = cpu_seconds(std::process::id()).expect("own /proc entry");
        assert!(s >= 0.0);
    }
}
