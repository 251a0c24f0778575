//! Pure logic of ip_throttle.so, a port of Perlbal::Plugin::Throttle: the
//! per-IP state machine ([`state`]), the options ([`options`]), CIDR allow
//! and deny lists ([`lists`]) and the decision for one request over them
//! ([`throttler`]), with reloads that build off the request path and swap
//! in whole, the management commands ([`ctl`]), and the record proxies
//! share through a store ([`shared`]). No TS symbols; time is
//! injected (`limits::Clock`).

#![forbid(unsafe_code)]

pub mod ctl;
pub mod events;
pub mod lists;
pub mod options;
pub mod shared;
pub mod state;
pub mod throttler;

#[cfg(test)]
mod tests;

use std::io::Read;
use std::path::Path;

pub use lists::{CidrList, Listed, Lists};
pub use options::{DefaultAction, DenyAction, EventKind, LogEvents, Options};
pub use state::{IpState, Params, Phase, Step, View};
pub use throttler::{
    Action, Decision, Delayed, Event, ListName, Machine, Request, Scope, Snapshot, Throttler,
    ToStep,
};

/// Reads configuration and list files; injected so tests need no file system.
pub trait Files: Send + Sync {
    /// The file's text, refusing files over `limit` bytes or not UTF-8.
    fn read(&self, path: &Path, limit: u64) -> Result<String, String>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsFiles;

impl Files for FsFiles {
    fn read(&self, path: &Path, limit: u64) -> Result<String, String> {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| e.to_string())?;
        if buf.len() as u64 > limit {
            return Err(format!("larger than {limit} bytes"));
        }
        String::from_utf8(buf)
            .map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
    }
}
