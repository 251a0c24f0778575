//! Link the plugin with `-z nodelete`: ATS dlcloses a remap .so when its
//! last rule is gone (after a reload that replaced the file or dropped its
//! rules), but the copy's timers, wake channels and store threads finish
//! shortly after, running its code. The image therefore stays mapped (a
//! few MB per replaced copy) while what it started winds down by itself.

#![forbid(unsafe_code)]

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
