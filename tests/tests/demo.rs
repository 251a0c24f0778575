//! ats-demo (what `ci/demo.sh` runs) stops on SIGINT, SIGTERM and SIGHUP
//! (Ctrl-C, `timeout`/`docker stop`, a closed terminal) and leaves no
//! traffic_manager or traffic_server behind (on 10.x there is no
//! traffic_manager: the demo runs traffic_server alone).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ats_tests::{ats, client, plugin, process_alive, runroot_processes, wait_until};

/// A running ats-demo; killed with whatever it left if the test fails.
struct Demo {
    child: Child,
    port: u16,
    root: PathBuf,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Demo {
    fn start() -> Demo {
        let rate = plugin("rate_limit");
        let plugin_dir = Path::new(&rate).parent().expect("plugin dir").to_owned();
        let dir = tempfile::Builder::new()
            .prefix("ats-demo-")
            .tempdir()
            .expect("temp dir");
        let root = dir
            .path()
            .canonicalize()
            .expect("temp dir path")
            .join("run");
        let out = dir.path().join("demo.out");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_ats-demo"))
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(&root)
            .env("ATS_PLUGIN_DIR", plugin_dir)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).expect("output file"))
            .stderr(Stdio::from(
                fs::File::options()
                    .append(true)
                    .open(&out)
                    .expect("output file"),
            ))
            .spawn()
            .expect("running ats-demo");
        let mut demo = Demo {
            child,
            port,
            root,
            out,
            _dir: dir,
        };
        // traffic_manager and traffic_server on 9.x; traffic_server alone on 10.x.
        let processes = if ats::has_manager() { 2 } else { 1 };
        let serving = wait_until(Duration::from_secs(60), || {
            runroot_processes(&demo.root).len() >= processes
                && client::get(port, "rate.demo", "/", &[]).is_ok_and(|r| r.status == 200)
        });
        assert!(serving, "ats-demo did not serve:\n{}", demo.output());
        assert!(
            matches!(demo.child.try_wait(), Ok(None)),
            "ats-demo exited:\n{}",
            demo.output()
        );
        demo
    }

    fn output(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let left = runroot_processes(&self.root);
        if !left.is_empty() {
            let mut kill = Command::new("kill");
            kill.arg("-KILL").arg("--");
            for pid in &left {
                kill.arg(pid.to_string());
            }
            let _ = kill.status();
        }
    }
}

fn stops_cleanly_on(signal: &str) {
    let mut demo = Demo::start();
    let pids = runroot_processes(&demo.root);
    let port = demo.port;
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(demo.child.id().to_string())
        .status()
        .expect("kill(1)");
    assert!(sent.success());
    let mut status = None;
    wait_until(Duration::from_secs(15), || {
        status = demo.child.try_wait().ok().flatten();
        status.is_some()
    });
    let status = status.unwrap_or_else(|| panic!("ats-demo still running 15 s after SIG{signal}"));
    assert!(status.success(), "SIG{signal}: {status}\n{}", demo.output());
    // ats-demo waits for its processes before exiting, so nothing may be left even briefly.
    let mut left = runroot_processes(&demo.root);
    left.extend(pids.iter().filter(|&&p| process_alive(p)));
    assert!(
        left.is_empty(),
        "SIG{signal} left {left:?} of {pids:?} running\n{}",
        demo.output()
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} still accepts connections after SIG{signal}"
    );
}

/// One after the other: a demo started alongside could be given the port
/// just freed and fail the port check.
#[test]
fn sigterm_sighup_and_sigint_stop_the_demo_and_everything_it_started() {
    for signal in ["TERM", "HUP", "INT"] {
        stops_cleanly_on(signal);
    }
}
