//! The sieve's tests, by subject (tests/), and the helpers they share.

use super::*;
use proptest::prelude::*;

/// N=2, S=2, one shard: bucket 1 holds 2, bucket 2 (entry) 4, block 4.
fn small(max_age: Option<u64>, perma: Option<Perma>) -> Sieve {
    Sieve::with_shards(
        SieveParams {
            buckets: 2,
            size: 2,
            max_age,
            perma,
        },
        1,
    )
}

fn hit(bucket: u8, count: u32) -> Hit {
    Hit { bucket, count }
}

/// The one shard's buckets, most recent first.
fn buckets(s: &Sieve) -> Vec<Vec<(u64, u32)>> {
    s.check();
    s.dump().remove(0)
}

mod memory;
mod model;
mod moves;
