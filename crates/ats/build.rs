//! Turns the ATS version that `ats-sys` found into cfgs (`ats_9`, `ats_10`),
//! so API differences between major versions are switched at compile time.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(ats_9)");
    println!("cargo:rustc-check-cfg=cfg(ats_10)");
    println!("cargo:rerun-if-env-changed=DEP_ATS_VERSION_MAJOR");
    let major: u32 = std::env::var("DEP_ATS_VERSION_MAJOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    match major {
        0..=9 => println!("cargo:rustc-cfg=ats_9"),
        _ => println!("cargo:rustc-cfg=ats_10"),
    }
}
