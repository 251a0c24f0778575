//! Micro-benchmark of rate_limit.so's option parsing (once per remap rule,
//! at config load and reload).
//!
//! Run: `cargo bench -p rate-limit-core --bench options`.

#![forbid(unsafe_code)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rate_limit_core::Options;

fn options(c: &mut Criterion) {
    let mut g = c.benchmark_group("options");
    let typical = [
        "--limit=100",
        "--queue=1000",
        "--maxage=5000",
        "--header=X-RateLimit-Delay",
        "--retry=1",
    ];
    g.bench_function("parse_typical", |b| {
        b.iter(|| {
            black_box(Options::parse(
                black_box("http://www.example.com/"),
                black_box(&typical),
            ))
            .expect("valid options")
        })
    });
    // The separate-value form (`@pparam=--limit @pparam=100`) and a rate.
    let split = [
        "--limit", "100", "--rate", "250.5", "--burst", "50", "--tag", "api",
    ];
    g.bench_function("parse_split_rate", |b| {
        b.iter(|| {
            black_box(Options::parse(
                black_box("http://api.example.com:8080/v1/"),
                black_box(&split),
            ))
            .expect("valid options")
        })
    });
    g.finish();
}

criterion_group!(benches, options);
criterion_main!(benches);
