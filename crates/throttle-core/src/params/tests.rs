//! The parameters' tests, by subject (tests/), and the helpers they share.

use super::*;

use optspec::files::{FsFiles, MemFiles as Mem};

const DIR: &str = "/etc/ts";

fn run(opts: &[&str], mem: &Mem) -> Result<Params, String> {
    parse(opts, Path::new(DIR), mem)
}

fn ok(opts: &[&str]) -> Params {
    run(opts, &Mem::default()).expect("valid")
}

fn err(opts: &[&str], mem: &Mem) -> String {
    run(opts, mem).expect_err("invalid")
}

mod auto;
mod files;
mod items;
mod prop;
