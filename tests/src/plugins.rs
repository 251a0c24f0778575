//! Locates the plugin `.so` files under test, building them first.
//!
//! `cargo test` does not build cdylib members as artifacts of an integration
//! test, so the harness runs `cargo build` for the same profile once per test
//! process (a no-op when up to date) and copies `lib<name>.so` to
//! `target/<profile>/plugins/<name>.so`, the names an operator uses.
//! `ATS_PLUGIN_DIR` overrides all of this.
//!
//! [`install`] puts a copy where a test can replace it: to ATS, a replaced
//! plugin, of the same build or (its GNU build-id changed) of another.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PLUGINS: &[(&str, &str)] = &[
    ("throttle", "throttle"),
    ("rate_limit", "rate_limit"),
    ("ip_throttle", "ip_throttle"),
    ("ats-probe", "probe"),
];

static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Absolute path of `<name>.so` (`throttle`, `rate_limit`, `ip_throttle` or `probe`).
pub fn plugin(name: &str) -> String {
    let dir = match DIR.get_or_init(build) {
        Ok(d) => d,
        Err(e) => panic!("cannot build the plugins: {e}"),
    };
    let p = dir.join(format!("{name}.so"));
    assert!(p.is_file(), "{} does not exist", p.display());
    p.display().to_string()
}

fn build() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("ATS_PLUGIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    // target/<profile>/deps/<test-binary>, target/<profile>/examples/<example>,
    // or target/<profile>/<binary>
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut profile_dir = exe
        .parent()
        .ok_or("cannot locate the target directory from the binary")?
        .to_path_buf();
    if profile_dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        profile_dir.pop();
    }
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(p) => p.to_owned(),
        None => return Err("unexpected target layout".into()),
    };
    let target_dir = profile_dir.parent().ok_or("no target dir")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace")?;
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args(["build", "--quiet", "--profile", &profile, "--target-dir"])
        .arg(target_dir);
    for (pkg, _) in PLUGINS {
        cmd.args(["-p", pkg]);
    }
    let status = cmd.status().map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed: {status}"));
    }
    let out = profile_dir.join("plugins");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    for (_, lib) in PLUGINS {
        let src = profile_dir.join(format!("lib{lib}.so"));
        // Copy then rename: a concurrently starting traffic_server never sees a half-written file.
        let tmp = out.join(format!(".{lib}.so.{}", std::process::id()));
        std::fs::copy(&src, &tmp).map_err(|e| format!("copy {}: {e}", src.display()))?;
        std::fs::rename(&tmp, out.join(format!("{lib}.so"))).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Writes `<name>.so` to `dest` as a new file with its mtime `minutes`
/// ahead (to ATS's dynamic reload, a replaced plugin), through a rename so
/// a loading traffic_server never sees half a file. `other_build`: the
/// copy's GNU build-id is changed (each byte xor the value), so the plugins
/// take it for another build, as after an upgrade; `None`: the same build,
/// as when the same package is installed again.
pub fn install(name: &str, dest: &Path, minutes: u64, other_build: Option<u8>) {
    let mut bytes = std::fs::read(plugin(name)).expect("read the plugin");
    if let Some(x) = other_build {
        let id = build_id_range(&bytes).expect("the plugin has a GNU build-id note");
        for b in &mut bytes[id] {
            *b ^= x;
        }
    }
    let tmp = dest.with_extension("so.tmp");
    std::fs::write(&tmp, &bytes).expect("write the copy");
    let f = std::fs::File::options()
        .write(true)
        .open(&tmp)
        .expect("open the copy");
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60 * minutes))
        .expect("mtime");
    drop(f);
    std::fs::rename(&tmp, dest).expect("rename the copy into place");
}

/// Where the GNU build-id's bytes are in an ELF file: the first note
/// named "GNU" of type 3 (NT_GNU_BUILD_ID), which the linker puts near
/// the file's start.
fn build_id_range(elf: &[u8]) -> Option<std::ops::Range<usize>> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?))
    };
    (0..elf.len().saturating_sub(16)).step_by(4).find_map(|i| {
        let size = word(i + 4)? as usize;
        let ok = word(i)? == 4
            && word(i + 8)? == 3
            && elf.get(i + 12..i + 16)? == b"GNU\0"
            && (8..=64).contains(&size);
        ok.then(|| i + 16..i + 16 + size)
    })
}
