//! Which Traffic Server the harness runs, chosen by `ATS_PREFIX`.
//!
//! - `ATS_PREFIX` unset (or empty): Debian's packages, binaries in
//!   `/usr/bin`, default configs in `/etc/trafficserver`, upstream plugins in
//!   `/usr/lib/trafficserver/modules` (9.2, with traffic_manager).
//! - `ATS_PREFIX=/opt/ats10` (any install prefix): `$ATS_PREFIX/bin`,
//!   `$ATS_PREFIX/etc/trafficserver`, `$ATS_PREFIX/libexec/trafficserver`,
//!   `$ATS_PREFIX/lib`, as ATS's own `cmake --install` lays them out.
//!
//! The version is detected from the binaries (`traffic_server --version`,
//! else `include/ts/apidefs.h`), never assumed from the variable. Tests
//! branch on [`version`] only where a behaviour truly differs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The environment variable naming the install prefix of the ATS under test.
pub const PREFIX_VAR: &str = "ATS_PREFIX";

struct Install {
    /// `None`: Debian's packaged layout.
    prefix: Option<PathBuf>,
    version: (u32, u32),
}

static INSTALL: OnceLock<Install> = OnceLock::new();

fn install() -> &'static Install {
    INSTALL.get_or_init(|| {
        let prefix = std::env::var_os(PREFIX_VAR)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let mut i = Install {
            prefix,
            version: (0, 0),
        };
        i.version = detect_version(&i).unwrap_or_else(|e| panic!("{e}"));
        i
    })
}

/// `$ATS_PREFIX`, or `None` for Debian's packaged layout.
pub fn prefix() -> Option<&'static Path> {
    install().prefix.as_deref()
}

/// (major, minor) of the Traffic Server under test, e.g. `(9, 2)` or `(10, 1)`.
pub fn version() -> (u32, u32) {
    install().version
}

/// True for 10.x and later: no traffic_manager, records.yaml, JSON-RPC.
pub fn is_10() -> bool {
    version().0 >= 10
}

/// Whether `traffic_manager` exists (9.x); in 10 `traffic_ctl` talks to
/// traffic_server itself.
pub fn has_manager() -> bool {
    !is_10()
}

/// Directory of the binaries (traffic_server, traffic_ctl, ...).
pub fn bin_dir() -> PathBuf {
    match prefix() {
        Some(p) => p.join("bin"),
        None => PathBuf::from("/usr/bin"),
    }
}

/// Absolute path of binary `name` (`traffic_server`, `traffic_ctl`, ...).
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Directory of ATS's shared libraries (libtscore / libtsapi, ...).
pub fn lib_dir() -> PathBuf {
    match prefix() {
        Some(p) => p.join("lib"),
        None => PathBuf::from("/usr/lib/trafficserver"),
    }
}

/// Directory of upstream's plugins (`libexecdir`).
pub fn plugin_dir() -> PathBuf {
    match prefix() {
        Some(p) => p.join("libexec/trafficserver"),
        None => PathBuf::from("/usr/lib/trafficserver/modules"),
    }
}

/// Directory of the plugin headers' parent (`include/ts/ts.h` lives below).
pub fn include_dir() -> PathBuf {
    match prefix() {
        Some(p) => p.join("include"),
        None => PathBuf::from("/usr/include"),
    }
}

/// Absolute path of upstream's `NAME.so` for this install (e.g.
/// `upstream_plugin("rate_limit")`). Not checked for existence.
pub fn upstream_plugin(name: &str) -> String {
    plugin_dir()
        .join(format!("{name}.so"))
        .display()
        .to_string()
}

/// The install's default configuration directory (ip_allow.yaml,
/// body_factory/, ...).
pub fn default_config_dir() -> PathBuf {
    match prefix() {
        Some(p) => p.join("etc/trafficserver"),
        None => PathBuf::from("/etc/trafficserver"),
    }
}

fn detect_version(i: &Install) -> Result<(u32, u32), String> {
    let bin = match &i.prefix {
        Some(p) => p.join("bin/traffic_server"),
        None => PathBuf::from("/usr/bin/traffic_server"),
    };
    // `traffic_server --version` prints "Traffic Server 10.1.4-0 <date> <host>"
    // (9.2: "Traffic Server 9.2.9 <date> <host>") and the long form below it.
    let mut tried = Vec::new();
    match Command::new(&bin)
        .arg("--version")
        .env_remove("TS_RUNROOT")
        .output()
    {
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if let Some(v) = parse_version(&text) {
                return Ok(v);
            }
            tried.push(format!("{} --version said {text:?}", bin.display()));
        }
        Err(e) => tried.push(format!("cannot run {} --version: {e}", bin.display())),
    }
    let header = match &i.prefix {
        Some(p) => p.join("include/ts/apidefs.h"),
        None => PathBuf::from("/usr/include/ts/apidefs.h"),
    };
    match std::fs::read_to_string(&header) {
        Ok(text) => {
            if let Some(v) = parse_apidefs(&text) {
                return Ok(v);
            }
            tried.push(format!("no TS_VERSION_MAJOR/MINOR in {}", header.display()));
        }
        Err(e) => tried.push(format!("cannot read {}: {e}", header.display())),
    }
    Err(format!(
        "cannot tell the Traffic Server version ({PREFIX_VAR}={:?}): {}",
        i.prefix,
        tried.join("; ")
    ))
}

/// (major, minor) from the first "Traffic Server X.Y..." in `text`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("Traffic Server ")?;
        let mut nums = rest.split(|c: char| !c.is_ascii_digit());
        let major = nums.next()?.parse().ok()?;
        let minor = nums.next()?.parse().ok()?;
        Some((major, minor))
    })
}

/// (major, minor) from `#define TS_VERSION_MAJOR n` / `..._MINOR n`.
fn parse_apidefs(text: &str) -> Option<(u32, u32)> {
    let get = |name: &str| {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.next()?.parse().ok())
                .flatten()
        })
    };
    Some((get("TS_VERSION_MAJOR")?, get("TS_VERSION_MINOR")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_version_banners() {
        assert_eq!(
            parse_version("Traffic Server 10.1.4-0 Nov 26 2026 06:57:19 vm\ntraffic_server: x"),
            Some((10, 1))
        );
        assert_eq!(
            parse_version("Traffic Server 9.2.9 Apr  4 2026 14:52:39 localhost\n"),
            Some((9, 2))
        );
        assert_eq!(
            parse_version("traffic_server: using root directory '/usr'"),
            None
        );
    }

    #[test]
    fn parses_apidefs() {
        let h = "#pragma once\n#define TS_VERSION_STRING \"10.1.4\"\n#define TS_VERSION_MAJOR 10\n#define TS_VERSION_MINOR 1\n";
        assert_eq!(parse_apidefs(h), Some((10, 1)));
        assert_eq!(parse_apidefs("#define TS_VERSION_MAJOR 9\n"), None);
    }
}
