//! Generates bindings for the installed Traffic Server plugin API.
//!
//! Header discovery: `ATS_INCLUDE_DIR` first, then the usual prefixes. The
//! ATS version read from `ts/apidefs.h` is exported to dependents through
//! `links = "ats"` metadata (`DEP_ATS_VERSION_MAJOR`, ...), so the safe
//! layer can switch on API differences between 9.x and 10.x.

use std::env;
use std::path::{Path, PathBuf};

const INCLUDE_ENV: &str = "ATS_INCLUDE_DIR";
const PREFIXES: &[&str] = &[
    "/usr/include",
    "/usr/local/include",
    "/opt/trafficserver/include",
];

/// Entry points the plugins define themselves; the headers declare them too.
const OWN_ENTRY_POINTS: &[&str] = &[
    "TSPluginInit",
    "TSRemapInit",
    "TSRemapNewInstance",
    "TSRemapDeleteInstance",
    "TSRemapDoRemap",
    "TSRemapDone",
    "TSRemapPreConfigReload",
    "TSRemapPostConfigReload",
    "TSRemapOSResponse",
];

fn main() {
    println!("cargo:rerun-if-env-changed={INCLUDE_ENV}");
    println!("cargo:rerun-if-changed=wrapper.h");
    // bindgen/clang-sys read these; list them so a change rebuilds.
    for var in ["LIBCLANG_PATH", "BINDGEN_EXTRA_CLANG_ARGS", "CLANG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let include_dir = match find_include_dir() {
        Ok(dir) => dir,
        Err(msg) => {
            // One clear line rather than a clang error about a missing header.
            eprintln!("error: {msg}");
            println!("cargo:warning={msg}");
            std::process::exit(1);
        }
    };
    let ts_dir = include_dir.join("ts");
    for h in ["ts.h", "remap.h", "apidefs.h"] {
        println!("cargo:rerun-if-changed={}", ts_dir.join(h).display());
    }

    let version = read_version(&ts_dir.join("apidefs.h")).unwrap_or_else(|msg| {
        eprintln!("error: {msg}");
        std::process::exit(1);
    });
    // Consumed by dependents' build scripts as DEP_ATS_*.
    println!("cargo:include={}", include_dir.display());
    println!("cargo:version_major={}", version.0);
    println!("cargo:version_minor={}", version.1);
    println!("cargo:version_micro={}", version.2);

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("TS.*")
        // TSmalloc/TSstrdup are macros over these; memory handed to ATS must come from them.
        .allowlist_function("_TS(malloc|strdup|free)")
        .allowlist_type("TS.*")
        .allowlist_type("_tsremap_api_info|_tm_remap_request_info")
        .allowlist_var("TS_.*|TSREMAP_.*")
        // A value from C outside the declared variants must not be UB:
        // newtypes accept any integer.
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in OWN_ENTRY_POINTS {
        builder = builder.blocklist_function(f);
    }

    let bindings = builder.generate().unwrap_or_else(|e| {
        eprintln!("error: bindgen failed on {}: {e}", ts_dir.display());
        std::process::exit(1);
    });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("OUT_DIR is writable");
}

fn find_include_dir() -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os(INCLUDE_ENV) {
        let dir = PathBuf::from(dir);
        return if dir.join("ts/ts.h").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "{INCLUDE_ENV}={} does not contain ts/ts.h; point it at the directory that holds ts/",
                dir.display()
            ))
        };
    }
    PREFIXES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("ts/ts.h").is_file())
        .ok_or_else(|| {
            format!(
                "Traffic Server plugin headers (ts/ts.h) not found in {}. \
                 Install them (Debian/Ubuntu: `apt-get install trafficserver-dev`) \
                 or set {INCLUDE_ENV} to the directory containing ts/ts.h",
                PREFIXES.join(", ")
            )
        })
}

fn read_version(apidefs: &Path) -> Result<(u32, u32, u32), String> {
    let text = std::fs::read_to_string(apidefs)
        .map_err(|e| format!("cannot read {}: {e}", apidefs.display()))?;
    let field = |name: &str| -> Result<u32, String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("#define "))
            .filter_map(|l| l.trim().strip_prefix(name))
            .find_map(|rest| rest.trim().parse().ok())
            .ok_or_else(|| format!("{name} not found in {}", apidefs.display()))
    };
    Ok((
        field("TS_VERSION_MAJOR")?,
        field("TS_VERSION_MINOR")?,
        field("TS_VERSION_MICRO")?,
    ))
}
