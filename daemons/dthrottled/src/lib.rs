//! `dthrottled`'s configuration file and connection handling, as a library:
//! the daemon (`src/main.rs`) is built on it, and the fuzz targets
//! (`fuzz/`) call its config parser and line protocol directly.

#![forbid(unsafe_code)]

pub mod config;
pub mod server;
