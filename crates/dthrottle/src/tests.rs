//! The buckets' tests, by subject (tests/), and the helpers they share.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use limits::{ManualClock, NANOS_PER_MS, NANOS_PER_SEC};
use proptest::prelude::*;

use super::*;

/// The seed's t = 0 (any origin works; 0 itself means "full bucket").
const T0: Nanos = 1_000 * NANOS_PER_SEC;

fn at(seconds: f64) -> Nanos {
    T0 + (seconds * NANOS_PER_SEC as f64).round() as Nanos
}

fn config(burst: u32, rate: f64) -> Config {
    Config {
        burst,
        rate,
        max_tags: 10_000,
        max_report_tags: 1_000,
    }
}

fn node(clock: &Arc<ManualClock>, c: Config) -> Buckets<Arc<ManualClock>> {
    Buckets::with_clock(c, clock.clone())
}

fn hits_of(r: &Report, tag: &[u8]) -> u32 {
    r.entries
        .iter()
        .find(|(t, _)| &**t == tag)
        .map_or(0, |(_, h)| *h)
}

fn assert_level(b: &Buckets<Arc<ManualClock>>, tag: &[u8], want: f64, slack: f64, row: &str) {
    let got = b.level(tag).unwrap_or(f64::from(10));
    assert!(
        (got - want).abs() <= slack,
        "{row}: level {got}, seed's table says {want}"
    );
}

mod fleet;
mod instance;
