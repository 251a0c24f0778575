//! Starting and stopping an instance, and finding its processes.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, Root, StartError, TrafficServer, TsBuilder};
use crate::ats;

const READY: &str = "Traffic Server is fully initialized";

/// Why a start is retried: the manager's child keeps dying unheard.
const SILENT_RELAUNCHES: &str =
    "traffic_manager relaunched traffic_server 3 times without a line in diags.log";

impl TsBuilder {
    /// Starts the instance and waits until it serves. Panics on harness
    /// errors; returns `Err` when ATS itself refuses to start (bad config).
    pub fn start(self) -> Result<TrafficServer, StartError> {
        let mut last = None;
        // A port picked free can be taken before ATS binds it: retry on that only.
        for _ in 0..3 {
            match self.try_start() {
                Ok(ts) => return Ok(ts),
                Err(e) if self.port.is_none() && e.diags.contains("Address already in use") => {
                    last = Some(e)
                }
                // Seen once under a cold CI build's load: traffic_manager's
                // child died at every relaunch before writing a line of
                // diags.log. A fresh runroot and port start normally.
                Err(e) if e.reason.starts_with(SILENT_RELAUNCHES) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn try_start(&self) -> Result<TrafficServer, StartError> {
        let dir = match &self.root {
            Some(p) => {
                let _ = fs::remove_dir_all(p);
                fs::create_dir_all(p).expect("creating the root directory");
                Root::Fixed(p.canonicalize().expect("root path"))
            }
            None => Root::Temp(
                tempfile::Builder::new()
                    .prefix("ats-test-")
                    .tempdir()
                    .expect("temp dir"),
            ),
        };
        let root = dir.path().to_path_buf();
        let root = root.as_path();
        let port = self.port.unwrap_or_else(free_port);
        let tls_port = self.tls.then(free_port);
        self.write_runroot(root, port, tls_port)
            .expect("writing the runroot");
        let runroot = root.join("runroot.yaml");
        let managed = self.manager && ats::has_manager();
        let bin = if managed {
            "traffic_manager"
        } else {
            "traffic_server"
        };
        let bin_path = ats::bin(bin);
        let mut cmd = match self.wrapper.split_first() {
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(&bin_path);
                c
            }
            None => Command::new(&bin_path),
        };
        cmd.env("TS_RUNROOT", &runroot)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(fs::File::create(root.join("stdout.txt")).expect("stdout file"))
            .stderr(fs::File::create(root.join("stderr.txt")).expect("stderr file"))
            // Own process group: the whole tree (manager + server) is killed together.
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (is trafficserver installed? {} selects it)",
                bin_path.display(),
                ats::PREFIX_VAR
            )
        });
        let mut ts = TrafficServer {
            dir,
            port,
            tls_port,
            child: Some(child),
            ctl: self.manager,
            managed,
            first_server_pid: None,
        };
        // What traffic_ctl connects to: traffic_manager's socket (9.x) or
        // traffic_server's JSON-RPC one (10.x).
        let ctl_socket = if !self.manager {
            None
        } else if managed {
            Some(ts.runtime_path("mgmtapi.sock"))
        } else {
            Some(ts.runtime_path("jsonrpc20.sock"))
        };
        let diags = ts.log_path("diags.log");
        let start = Instant::now();
        loop {
            let text = fs::read_to_string(&diags).unwrap_or_default();
            if text.contains(READY) && ctl_socket.as_ref().is_none_or(|s| s.exists()) {
                ts.first_server_pid = ts.server_pid();
                return Ok(ts);
            }
            let exited = match ts.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                _ => None,
            };
            let fatal = text
                .lines()
                .find(|l| l.contains("FATAL") || l.contains("EMERGENCY"));
            let silent = ts.managed
                && text.is_empty()
                && fs::read_to_string(ts.log_path("manager.log"))
                    .unwrap_or_default()
                    .matches("Relaunching proxy")
                    .count()
                    >= 3;
            if exited.is_some() || fatal.is_some() || silent || start.elapsed() > self.start_timeout
            {
                let reason = match (exited, fatal) {
                    (_, Some(line)) => format!("traffic_server failed: {line}"),
                    (Some(status), None) => format!("{bin} exited: {status}"),
                    (None, None) if silent => SILENT_RELAUNCHES.to_owned(),
                    (None, None) => format!("not ready after {:?}", self.start_timeout),
                };
                ts.kill();
                return Err(StartError {
                    reason,
                    diags: ts.all_logs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl TrafficServer {
    /// traffic_server's resident memory in kB (`VmRSS`).
    pub fn rss_kb(&self) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.server_pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// PID of the traffic_server process (not the manager).
    pub fn server_pid(&self) -> Option<u32> {
        if !self.managed {
            return self.child.as_ref().map(|c| c.id());
        }
        let lock = fs::read_to_string(self.runtime_path("server.lock")).ok()?;
        lock.trim().parse().ok()
    }

    /// True while traffic_server is running and, under the manager, is the
    /// same process that started (traffic_manager restarts a crashed one,
    /// with a new pid in server.lock and a second READY line in diags.log).
    pub fn is_running(&mut self) -> bool {
        let child = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
        if !self.managed {
            return child;
        }
        let Some(first) = self.first_server_pid else {
            return false;
        };
        child
            && self.server_pid() == Some(first)
            && process_alive(first)
            && self.diags().matches(READY).count() == 1
    }

    fn kill(&mut self) {
        // Found now, while alive: a dying process loses its environment first.
        let started = runroot_processes(self.dir.path());
        if let Some(mut child) = self.child.take() {
            // The whole process group at once: traffic_manager would restart a
            // traffic_server killed alone. kill(1) avoids unsafe here.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        // Until every thread has exited (a zombie leader's other threads can
        // still hold the port), killing any process of this root outside the
        // group. Bounded: 50 rounds of 100 ms.
        for _ in 0..50 {
            let strays = runroot_processes(self.dir.path());
            if strays.is_empty() && !started.iter().any(|&p| process_alive(p)) {
                break;
            }
            if !strays.is_empty() {
                let mut kill = Command::new("kill");
                kill.arg("-KILL").arg("--");
                for pid in &strays {
                    kill.arg(pid.to_string());
                }
                let _ = kill.stderr(Stdio::null()).status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TrafficServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "=== traffic_server logs ({}) ===\n{}",
                self.dir.path().display(),
                self.all_logs()
            );
        }
    }
}

/// PIDs of the running processes of the instance whose runroot is `root`
/// (traffic_manager, traffic_server), found from any process by their
/// `TS_RUNROOT` environment. A process that is exiting may already be
/// missing: check PIDs found earlier with [`process_alive`].
pub fn runroot_processes(root: &Path) -> Vec<u32> {
    let want = format!("TS_RUNROOT={}", root.join("runroot.yaml").display());
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|&b| b == 0).any(|v| v == want.as_bytes()) && process_alive(pid)
        })
        .collect()
}

/// True while any thread of process `pid` has not exited. The leader of a
/// killed process can be a zombie (its memory and environment gone) while
/// other threads still exit and hold its files, such as a listening socket.
pub fn process_alive(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).any(|t| {
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the `(comm)` field, which may itself hold spaces.
        let state = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().next());
        matches!(state, Some(s) if s != "Z" && s != "X")
    })
}
