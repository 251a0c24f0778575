//! The command line an operator and the systemd unit use: `--version`
//! (the workspace's release), `--help` (the packaged config's path as the
//! default), `--check`.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dthrottled"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running dthrottled: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_is_the_workspace_release() {
    for flag in ["--version", "-V"] {
        let (ok, out, err) = run(&[flag]);
        assert!(ok, "{flag}: {err}");
        assert_eq!(out, format!("dthrottled {}\n", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn help_names_the_packaged_config_and_every_flag() {
    let (ok, out, err) = run(&["--help"]);
    assert!(ok, "{err}");
    for want in [
        "/etc/dthrottled/dthrottled.conf",
        "--config",
        "--check",
        "--version",
    ] {
        assert!(out.contains(want), "{want} missing from {out:?}");
    }
}

#[test]
fn check_validates_the_example_config_that_the_package_installs() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/dthrottled.conf.example");
    let (ok, out, err) = run(&["--check", "--config", example]);
    assert!(ok, "{err}");
    assert!(out.contains("is valid"), "{out}");
    let (ok, _, err) = run(&["--check", "--config", "/nonexistent/dthrottled.conf"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/dthrottled.conf"), "{err}");
}
