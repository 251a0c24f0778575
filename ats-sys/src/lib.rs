//! Raw, generated bindings to the Traffic Server plugin C API.
//!
//! Nothing here is safe to call directly from plugin code: use the `ats`
//! crate. No link flags are emitted: `traffic_server` exports the `TS*`
//! symbols and resolves them when it loads a plugin.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

#[cfg(test)]
mod tests {
    /// Every TS function is declared `extern "C-unwind"` on both lines:
    /// ATS is C++ behind its C names on 9.2 too, so an exception (a
    /// `bad_alloc`) may leave any of them, and through an `extern "C"`
    /// declaration that would be undefined behaviour in Rust.
    #[test]
    fn ts_functions_may_unwind() {
        let bindings = include_str!(concat!(env!("OUT_DIR"), "/bindings.rs"));
        // bindgen writes one `extern` block per item; statics stay "C".
        let blocks: Vec<&str> = bindings.split("extern \"").skip(1).collect();
        let c_fns = blocks
            .iter()
            .filter(|b| b.starts_with("C\" {") && b.contains("pub fn "))
            .count();
        assert_eq!(c_fns, 0, "functions declared extern \"C\"");
        assert!(blocks
            .iter()
            .any(|b| b.starts_with("C-unwind\" {") && b.contains("pub fn TSHttpTxnReenable(")));
    }
}
