//! Raw, generated bindings to the Traffic Server plugin C API.
//!
//! Nothing here is safe to call directly from plugin code: use the `ats`
//! crate. No link flags are emitted: `traffic_server` exports the `TS*`
//! symbols and resolves them when it loads a plugin.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
