//! Unit and property tests of the pure core.

mod lists;
mod options;
mod shared;
mod state;
mod throttler;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::Files;

/// Files in memory.
#[derive(Default)]
pub(crate) struct MemFiles(pub HashMap<PathBuf, String>);

impl MemFiles {
    pub(crate) fn with(files: &[(&str, &str)]) -> MemFiles {
        MemFiles(
            files
                .iter()
                .map(|(p, t)| (PathBuf::from(p), t.to_string()))
                .collect(),
        )
    }
}

impl Files for MemFiles {
    fn read(&self, path: &Path, limit: u64) -> Result<String, String> {
        let t = self
            .0
            .get(path)
            .ok_or("No such file or directory (os error 2)")?;
        if t.len() as u64 > limit {
            return Err(format!("larger than {limit} bytes"));
        }
        Ok(t.clone())
    }
}

pub(crate) const S: u64 = limits::NANOS_PER_SEC;
pub(crate) const MS: u64 = limits::NANOS_PER_MS;
