//! Generates bindings for the installed Traffic Server plugin API.
//!
//! Header discovery: `ATS_INCLUDE_DIR`, else `$ATS_PREFIX/include` (an ATS
//! install such as `/opt/ats10`), else the usual prefixes (Debian's 9.2
//! under /usr). The ATS version is read from `ts/apidefs.h`, never assumed,
//! and exported to dependents through `links = "ats"` metadata
//! (`DEP_ATS_VERSION_MAJOR`, ...), so the safe layer can switch on API
//! differences between 9.x and 10.x.
//!
//! 9.x: the TS API is C; bindgen reads it in C mode and Rust calls the `TS*`
//! symbols that traffic_server exports.
//!
//! 10.x: `ts/ts.h` is C++17 and every `TS*` function has C++ linkage (a
//! mangled symbol in libtsapi.so). bindgen reads the headers in C++ mode for
//! the types and declarations, but declares only the functions listed in
//! `shim/forward.def`, each linked to `tsrs_<Name>`: an `extern "C"`
//! forwarder that `shim/ts_shim.cc` defines with the real signature
//! (decltype), compiled by `cc` against the same headers. So the Rust side
//! keeps the C names and types on both versions, never depends on name
//! mangling, and calling a function not in the list is a compile error
//! rather than a plugin that traffic_server refuses to load.
//!
//! On both, the shim also provides `shim/ts_shim.h`: diagnostics and text
//! log writes as finished strings (10.x debug output needs the C++
//! `DbgCtl`; variadic calls cannot be forwarded).

use std::env;
use std::path::{Path, PathBuf};

const INCLUDE_ENV: &str = "ATS_INCLUDE_DIR";
const PREFIX_ENV: &str = "ATS_PREFIX";
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
    println!("cargo:rerun-if-env-changed={PREFIX_ENV}");
    for f in [
        "wrapper.h",
        "shim/ts_shim.h",
        "shim/ts_shim.cc",
        "shim/forward.def",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
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

    let forwarded = if version.0 >= 10 {
        read_forward_list(Path::new("shim/forward.def")).unwrap_or_else(|msg| {
            eprintln!("error: {msg}");
            std::process::exit(1);
        })
    } else {
        Vec::new()
    };
    build_shim(&include_dir, version.0);

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .header("shim/ts_shim.h")
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("tsrs_.*")
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
    if forwarded.is_empty() {
        builder = builder
            .allowlist_function("TS.*")
            // TSmalloc/TSstrdup are macros over these; memory handed to ATS must come from them.
            .allowlist_function("_TS(malloc|strdup|free)")
            // 9.x's C names are C++ underneath as well: an exception may
            // leave any of them (see the 10.x branch). Not the callback
            // types (`TSEventFunc`, `TSThreadFunc`, `TSRecordDumpCb`): ATS
            // calls our trampolines through them, which never unwind. The
            // regex crate has no lookahead, hence the spelled-out endings.
            .override_abi(
                bindgen::Abi::CUnwind,
                "(TS.*([^bc]|[^C]b|[^n]c|[^u]nc|[^F]unc)|_TS.*|tsrs_.*)",
            );
    } else {
        // C++ mode: exactly the forwarded functions, each linked to its
        // forwarder; no std:: types reach the bindings.
        builder = builder
            .clang_args(["-x", "c++", "-std=c++17"])
            .allowlist_function(format!("({})", forwarded.join("|")))
            // ATS is C++: an exception (bad_alloc) could leave a forwarder,
            // which is a tail call. "C-unwind" makes that defined behaviour
            // in Rust (the guard aborts, or fails safe as on a panic: std
            // leaves which unspecified) instead of UB, at no cost.
            .override_abi(
                bindgen::Abi::CUnwind,
                format!("({}|tsrs_.*)", forwarded.join("|")),
            )
            .opaque_type("std::.*")
            .parse_callbacks(Box::new(Forwarders(forwarded.clone())));
    }
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

/// Links each forwarded TS function to its `extern "C"` forwarder.
#[derive(Debug)]
struct Forwarders(Vec<String>);

impl bindgen::callbacks::ParseCallbacks for Forwarders {
    fn generated_link_name_override(
        &self,
        item: bindgen::callbacks::ItemInfo<'_>,
    ) -> Option<String> {
        self.0
            .iter()
            .any(|f| f == item.name)
            .then(|| format!("tsrs_{}", item.name))
    }
}

/// The names of `TSRS_FORWARD(N, Name)` lines.
fn read_forward_list(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("TSRS_FORWARD("))
        .filter_map(|rest| rest.split_once(',')?.1.trim().strip_suffix(')'))
        .map(|name| name.trim().to_owned())
        .collect();
    if names.is_empty() {
        return Err(format!("no TSRS_FORWARD lines in {}", path.display()));
    }
    Ok(names)
}

/// Compiles shim/ts_shim.cc against the found headers into a static
/// library linked into the plugin. Its symbols are hidden: each plugin .so
/// has its own copy and exports none of them.
fn build_shim(include_dir: &Path, major: u32) {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("shim/ts_shim.cc")
        .include(include_dir)
        .include("shim")
        .flag("-fvisibility=hidden")
        .warnings(true);
    if major < 10 {
        // 9.x's shim only calls C functions: no C++ runtime, and no
        // exception tables (their personality routine is libstdc++'s, which
        // a test binary of a plugin crate would then have to link).
        build.cpp_link_stdlib(None).flag("-fno-exceptions");
    }
    build.compile("tsrs_shim");
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
    if let Some(prefix) = env::var_os(PREFIX_ENV) {
        let dir = PathBuf::from(prefix).join("include");
        return if dir.join("ts/ts.h").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "{PREFIX_ENV}={} has no include/ts/ts.h; point it at an ATS install prefix (such as /opt/ats10)",
                dir.parent().unwrap_or(&dir).display()
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
                 or set {PREFIX_ENV} to an ATS install prefix (ATS 10: {PREFIX_ENV}=/opt/ats10), \
                 or {INCLUDE_ENV} to the directory containing ts/ts.h",
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
