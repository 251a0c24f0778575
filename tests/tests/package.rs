//! The release packages as an operator installs them (docs/packages.md):
//! the installed files, never the build tree. Every test here is ignored
//! by a plain `cargo test`, since each needs a package installed on this
//! machine first; `ci/package-test.sh` installs them (the .deb files with
//! `dpkg -i`, the ATS 10 tarball unpacked into a temporary prefix that
//! `ATS_PREFIX` names) and runs them with `--ignored`:
//!
//! - `deb_*`: Debian's Traffic Server 9.2 (`ATS_PREFIX` unset) and the
//!   installed `ats-throttle-plugins` and `dthrottled` packages;
//! - `tarball_*`: the ATS 10 at `ATS_PREFIX`, with the tarball unpacked there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ats_tests::{ats, Origin, TrafficServer};

/// The release (the workspace's version).
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The plugins' subdirectory of the plugin directory, as in the documented
/// remap line `@plugin=ats-throttle/rate_limit.so`.
const SUBDIR: &str = "ats-throttle";
const PLUGINS: [&str; 3] = ["rate_limit", "throttle", "ip_throttle"];

/// Where a package put the plugins and the example configurations.
struct Layout {
    /// The plugins' directory (under ATS's plugin directory).
    plugins: PathBuf,
    /// The example configurations.
    examples: PathBuf,
    /// The examples' file name suffix (the tarball's `.example`).
    suffix: &'static str,
}

impl Layout {
    fn example(&self, name: &str) -> String {
        let p = self.examples.join(format!("{name}{}", self.suffix));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}

fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The .deb's layout, checked to be the installed package's files.
fn deb_layout() -> Layout {
    assert!(
        ats::prefix().is_none() && ats::version().0 == 9,
        "the .deb tests run on Debian's 9.2 (ATS_PREFIX unset), not {:?}",
        ats::version()
    );
    let plugins = ats::plugin_dir().join(SUBDIR);
    for p in PLUGINS {
        let so = plugins.join(format!("{p}.so"));
        let (ok, owner) = run("dpkg-query", &["-S", &so.display().to_string()]);
        assert!(
            ok && owner.starts_with("ats-throttle-plugins:"),
            "{} is not the package's: {owner}",
            so.display()
        );
    }
    Layout {
        plugins,
        examples: PathBuf::from("/usr/share/doc/ats-throttle-plugins/examples"),
        suffix: "",
    }
}

/// The tarball's layout under `ATS_PREFIX`.
fn tarball_layout() -> Layout {
    let prefix = ats::prefix().expect("the tarball tests need ATS_PREFIX (the unpacked prefix)");
    assert!(
        ats::is_10(),
        "the tarball is for ATS 10, not {:?}",
        ats::version()
    );
    let plugins = ats::plugin_dir().join(SUBDIR);
    for p in PLUGINS {
        let so = plugins.join(format!("{p}.so"));
        let meta =
            std::fs::symlink_metadata(&so).unwrap_or_else(|e| panic!("{}: {e}", so.display()));
        assert!(
            meta.is_file(),
            "{} is not a file unpacked from the tarball",
            so.display()
        );
    }
    Layout {
        plugins,
        examples: prefix.join("etc/trafficserver").join(SUBDIR),
        suffix: ".example",
    }
}

/// Starts a traffic_server with the installed example remap.config and
/// plugin.config as they are (their relative paths resolve against the
/// plugin and config directories, where the files go when an operator
/// copies them), beside three rules of the documented form that must
/// limit as configured.
fn installed_plugins_load_and_limit(layout: &Layout) {
    for p in PLUGINS {
        let so = layout.plugins.join(format!("{p}.so"));
        assert!(so.is_file(), "{} missing", so.display());
    }
    let origin = Origin::start();
    let o = origin.url();
    let remap = format!(
        "{}\n\
         map http://rl.test/ {o} @plugin={SUBDIR}/rate_limit.so @pparam=--rate=0.001 @pparam=--burst=2 @pparam=--queue=0\n\
         map http://th.test/ {o} @plugin={SUBDIR}/throttle.so @pparam=max:0 @pparam=id:pkg\n\
         map http://ip.test/ {o} @plugin={SUBDIR}/ip_throttle.so @pparam=--deny-file={SUBDIR}/deny.txt\n",
        layout.example("remap.config")
    );
    let mut b = TrafficServer::builder()
        .remap(remap)
        .plugin_config(layout.example("plugin.config"))
        .config_file(&format!("{SUBDIR}/deny.txt"), "127.0.0.1\n");
    for f in [
        "throttle.config",
        "ip_throttle.config",
        "rate_limit_global.yaml",
    ] {
        b = b.config_file(&format!("{SUBDIR}/{f}"), &layout.example(f));
    }
    let ts = b
        .start()
        .unwrap_or_else(|e| panic!("traffic_server with the installed plugins: {e:?}"));
    let diags = ts.diags();
    let (major, minor) = ats::version();
    for p in PLUGINS {
        let want = format!("[{p}] {p}.so {VERSION}, built for Traffic Server {major}.{minor}.");
        let line = diags.lines().find(|l| l.contains(&want));
        let line = line.unwrap_or_else(|| panic!("no {want:?} in diags.log:\n{diags}"));
        eprintln!("diags.log: {line}");
    }
    assert!(
        diags.contains("global mode: ") && diags.contains("rate_limit_global.yaml"),
        "the example plugin.config's global mode did not start:\n{diags}"
    );

    // rate_limit.so: a burst of 2, then refused at once.
    let statuses: Vec<u16> = (0..3)
        .map(|_| ts.get("rl.test", "/", &[]).expect("rl.test").status)
        .collect();
    assert_eq!(statuses, [200, 200, 429], "{}", ts.all_logs());
    // throttle.so: no uncached request may reach the origin.
    assert_eq!(ts.get("th.test", "/", &[]).expect("th.test").status, 503);
    // ip_throttle.so: a deny-listed client is refused.
    assert_eq!(ts.get("ip.test", "/", &[]).expect("ip.test").status, 403);
    assert_eq!(
        origin.count(),
        2,
        "only rl.test's admitted requests reach the origin"
    );
}

#[test]
#[ignore = "needs the .deb installed: ci/package-test.sh"]
fn deb_plugins_load_by_the_documented_remap_line_and_limit() {
    installed_plugins_load_and_limit(&deb_layout());
}

#[test]
#[ignore = "needs the ATS 10 tarball unpacked at ATS_PREFIX: ci/package-test.sh"]
fn tarball_plugins_load_by_the_documented_remap_line_and_limit() {
    installed_plugins_load_and_limit(&tarball_layout());
}

const UNIT: &str = "/lib/systemd/system/dthrottled.service";
const CONFIG: &str = "/etc/dthrottled/dthrottled.conf";

/// The unit's `ExecStart=` command line.
fn exec_start() -> Vec<String> {
    let unit = std::fs::read_to_string(UNIT).unwrap_or_else(|e| panic!("{UNIT}: {e}"));
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("no ExecStart= in {UNIT}"));
    line.split_whitespace().map(str::to_owned).collect()
}

/// dthrottled started as its unit starts it (the installed binary, the
/// installed config, as the package's user, with no capabilities and no
/// new privileges), without systemd: it listens where the config says and
/// limits a tag to the configured burst.
#[test]
#[ignore = "needs the dthrottled .deb installed: ci/package-test.sh"]
fn deb_dthrottled_starts_from_the_installed_binary_and_config() {
    let argv = exec_start();
    assert_eq!(
        argv,
        ["/usr/sbin/dthrottled", "--config", CONFIG],
        "the unit's ExecStart="
    );
    let (ok, owner) = run("dpkg-query", &["-S", &argv[0]]);
    assert!(ok && owner.starts_with("dthrottled:"), "{owner}");
    let (ok, conffiles) = run("dpkg-query", &["-W", "-f=${Conffiles}", "dthrottled"]);
    assert!(
        ok && conffiles.contains(CONFIG),
        "{CONFIG} is not a conffile: {conffiles}"
    );
    let (ok, out) = run(&argv[0], &["--version"]);
    assert!(ok && out == format!("dthrottled {VERSION}\n"), "{out}");
    let (ok, out) = run(&argv[0], &["--check"]);
    assert!(
        ok && out.contains(CONFIG),
        "--check of the default config: {out}"
    );
    let config = std::fs::read_to_string(CONFIG).unwrap_or_else(|e| panic!("{CONFIG}: {e}"));
    let burst: usize = setting(&config, "burst").parse().expect("burst");
    let listen = setting(&config, "listen_tcp");

    let mut child = Command::new("setpriv")
        .args([
            "--reuid=dthrottled",
            "--regid=dthrottled",
            "--init-groups",
            "--no-new-privs",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ])
        .args(&argv)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("setpriv (util-linux): {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let want = format!("dthrottled: listening on tcp {listen}");
    while !seen.iter().any(|l: &String| l == &want) {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no {want:?} within 10 s: {seen:?} (another dthrottled on the port?)");
            }
        }
    }
    let answers = (|| -> std::io::Result<String> {
        let mut c = TcpStream::connect(listen)?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.write_all("package-test\n".repeat(burst + 1).as_bytes())?;
        let mut buf = vec![0u8; 3 * (burst + 1)];
        c.read_exact(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    })();
    let _ = child.kill();
    let _ = child.wait();
    let answers = answers.unwrap_or_else(|e| panic!("asking {listen}: {e}"));
    assert_eq!(answers, format!("{}NO\n", "OK\n".repeat(burst)));
}

/// The value of `name = value` in a dthrottled config (comments after `#`).
fn setting<'a>(config: &'a str, name: &str) -> &'a str {
    config
        .lines()
        .filter_map(|l| l.split('#').next())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim())
        .unwrap_or_else(|| panic!("no {name} in {CONFIG}"))
}

/// The installed unit passes `systemd-analyze verify` (its commands exist,
/// its directives are known), which needs no running systemd.
#[test]
#[ignore = "needs the dthrottled .deb installed: ci/package-test.sh"]
fn deb_dthrottled_unit_passes_systemd_analyze_verify() {
    assert!(Path::new(UNIT).is_file(), "{UNIT} missing");
    let (ok, out) = run("systemd-analyze", &["verify", UNIT]);
    assert!(ok, "systemd-analyze verify {UNIT}: {out}");
    let about_unit: Vec<&str> = out.lines().filter(|l| l.contains("dthrottled")).collect();
    assert!(
        about_unit.is_empty(),
        "systemd-analyze verify: {about_unit:?}"
    );
}
