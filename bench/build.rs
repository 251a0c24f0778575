//! Builds the floor plugin (`floor/floor.c`, issue 32) for the Traffic
//! Server line ats-sys found (its headers and major version, through its
//! `links = "ats"` metadata): as C for 9.x, as C++17 for 10.x, whose
//! headers are C++. `ats-bench icount` loads it from the path in
//! `ATS_BENCH_FLOOR_SO`. The `cc` crate picks the compiler and flags; it
//! builds objects, so the link into a shared object is run here.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=floor/floor.c");
    let include = env::var("DEP_ATS_INCLUDE").expect("ats-sys exports its include dir");
    let major: u32 = env::var("DEP_ATS_VERSION_MAJOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("ats-sys exports the ATS major version");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut build = cc::Build::new();
    build
        .file("floor/floor.c")
        .include(&include)
        .pic(true)
        .opt_level(2)
        .warnings(true);
    if major >= 10 {
        // 10.x's headers throw (libswoc): exceptions stay on.
        build.cpp(true).std("c++17");
    }
    let objects = build.compile_intermediates();
    let so = out.join("floor.so");
    let status = build
        .get_compiler()
        .to_command()
        .arg("-shared")
        .args(&objects)
        .arg("-o")
        .arg(&so)
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "linking {} failed", so.display());
    println!("cargo:rustc-env=ATS_BENCH_FLOOR_SO={}", so.display());
}
