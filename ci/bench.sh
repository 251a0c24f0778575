#!/usr/bin/env bash
# Benchmarks (issue 5), reproducible with this one command on a Debian/Ubuntu
# machine: installs what is missing (Traffic Server, upstream's plugins, wrk,
# nginx), builds release, then
#
#   ci/bench.sh            full run (~15 min on 2 cores): criterion
#                          micro-benchmarks, then the load bench (no plugin /
#                          upstream rate_limit.so / ours / throttle.so, cache
#                          hits and proxied) and the queue-resume comparison on
#                          a real traffic_server; updates BENCHMARKS.md.
#   ci/bench.sh --smoke    for CI: first, with no bench run, the generated
#                          sections of BENCHMARKS.md against what they cite
#                          (`ats-bench check-sections`): fails if the
#                          micro-icount table's baseline column differs from
#                          bench/micro-icount/baseline.tsv in any row, or a
#                          section's plugin commit is not in HEAD's history;
#                          and the convergence plots' scenarios rerun
#                          (`ats-bench plots --check`, simulated, well under
#                          a second), writing nothing: fails if one leaves
#                          its documented bound.
#                          Then every configuration once for a second and
#                          the criterion benches once each in test mode (no
#                          timing), writes nothing; and the micro-benchmarks'
#                          instruction counts (callgrind, ~2 s) checked against
#                          bench/micro-icount/baseline.tsv: fails on a
#                          regression above 5 % and 8 instructions; and
#                          `ats-bench tls --smoke` (~45 s: 5 connections per
#                          callgrind window, a 2.5 s flood; fails if a handshake
#                          does not end as its configuration says).
#   ci/bench.sh icount     instructions per request of traffic_server under
#                          callgrind for every configuration and the floor (a
#                          minimal C limiter, bench/floor; issue 15, ~5 min),
#                          and the micro-benchmarks' counts; updates BENCHMARKS.md.
#   ci/bench.sh plots      --limit=auto's convergence (issue 34), simulated on
#                          crates/adaptive-sim's model origin (no Traffic
#                          Server, about a second): writes bench/plots/*.png and
#                          updates BENCHMARKS.md's adaptive-plots section.
#   ci/bench.sh tls        rate_limit.so's global mode (issue 29): instructions
#                          per TLS connection under callgrind (no plugin, ours
#                          accepting and refusing, on 10.x upstream's too) and a
#                          2,000 connections/s flood from one address against a
#                          per-ip selector (~4 min); updates BENCHMARKS.md.
#
# Extra arguments go to ats-bench (see `cargo run -p ats-bench -- --help`),
# e.g. `ci/bench.sh --rounds 9 --duration 15`.
#
# Debian's 9.2 by default; with ATS_PREFIX (e.g. /opt/ats10) against that
# install, built in its own target dir (ci/ats-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = plots ]; then
    # Simulated: only ats-bench is built (it needs the ATS headers), nothing is run.
    ci/install-deps.sh
else
    ci/install-deps.sh wrk nginx-light valgrind
fi
. ci/ats-env.sh
ats_env
echo "bench: $ats_flavour, cargo target dir $TARGET"
MICRO=(-p limits -p rate-limit-core -p throttle-core -p keyed --bench admission --bench options --bench gate --bench keyed)
# Recorded in BENCHMARKS.md as the command that produced it.
export ATS_BENCH_COMMAND="ci/bench.sh${*:+ $*}"

if [ "${1:-}" = "--smoke" ]; then
    # Cheap, so first (under a second once built). After a baseline rewrite
    # (`micro-icount --write`) without --out, refresh the table's baseline
    # column: cargo run --release -p ats-bench -- micro-icount --baseline-only --out BENCHMARKS.md
    cargo run --release --locked -p ats-bench -- check-sections BENCHMARKS.md
    cargo run --release --locked -p ats-bench -- plots --check
fi

if [ "${1:-}" = plots ]; then
    shift
    exec cargo run --release --locked -p ats-bench -- plots --out-dir bench/plots --out BENCHMARKS.md "$@"
fi

cargo build --release --locked -p ats-bench -p rate_limit -p throttle -p ip_throttle -p micro-icount

if [ "${1:-}" = "icount" ]; then
    shift
    # Measured and written even if a count regressed (the smoke run is the check).
    cargo run --release --locked -p ats-bench -- micro-icount --out BENCHMARKS.md
    exec cargo run --release --locked -p ats-bench -- icount --out BENCHMARKS.md "$@"
fi

if [ "${1:-}" = "tls" ]; then
    shift
    exec cargo run --release --locked -p ats-bench -- tls --out BENCHMARKS.md "$@"
fi

if [ "${1:-}" = "--smoke" ]; then
    shift
    # `--test` runs each criterion benchmark once: it must work, timing is not taken.
    cargo bench --locked "${MICRO[@]}" -- --test
    cargo run --release --locked -p ats-bench -- micro-icount --check
    cargo run --release --locked -p ats-bench -- tls --smoke
    exec cargo run --release --locked -p ats-bench -- --smoke --no-micro "$@"
fi

# Only this run's criterion results go into the table.
rm -rf "$TARGET/criterion"
cargo bench --locked "${MICRO[@]}"
exec cargo run --release --locked -p ats-bench -- --out BENCHMARKS.md --criterion "$TARGET/criterion" "$@"
