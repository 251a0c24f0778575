//! Unit and property tests of the pure core.

mod lists;
mod options;
mod shared;
mod state;
mod throttler;

pub(crate) use optspec::files::MemFiles;

pub(crate) const S: u64 = limits::NANOS_PER_SEC;
pub(crate) const MS: u64 = limits::NANOS_PER_MS;
