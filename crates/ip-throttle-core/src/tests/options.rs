//! The options (`Options::parse`, `@pparam`s and `--config` files), by
//! subject (options/), and the helper its parts share.

use std::path::Path;

use store_url::StoreUrl;

use super::{MemFiles, MS, S};
use crate::options::{parse_seconds, DefaultAction, DenyAction, EventKind, LogEvents, Options};

fn parse(args: &[&str]) -> Result<Options, String> {
    Options::parse(args, Path::new("/etc/ts"), &MemFiles::default())
}

mod config_file;
mod names;
mod proxies;
mod store;
mod values;
