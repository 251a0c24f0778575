//! The options' tests, by subject (tests/), and the helpers they share.

use super::*;

const URL: &str = "http://cdn.example.com/";

fn parse(args: &[&str]) -> Result<Options, OptionError> {
    Options::parse(URL, args)
}

fn err(args: &[&str]) -> String {
    parse(args).expect_err("must be rejected").0
}

/// Every option's name and whether it takes a value, from the tables.
fn all_options() -> Vec<(&'static str, bool)> {
    tables()
        .iter()
        .flat_map(|t| (0..t.count()).map(|i| (t.name(i), t.takes(i) != optspec::Takes::Flag)))
        .collect()
}

mod auto;
mod block;
mod combinations;
mod syntax;
mod tables;
