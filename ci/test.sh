#!/usr/bin/env bash
# Runs every test: unit and property tests of the pure crates, and the
# integration tests that start real traffic_server instances on loopback.
#
#   ci/test.sh --no-run   builds everything the tests run and load, runs
#                         nothing (the Docker image does this, so `docker run`
#                         tests without compiling)
set -euo pipefail
cd "$(dirname "$0")/.."
# nginx: the side-by-side test against limit_req (tests/tests/keyed_nginx.rs);
# redis-server: the store tests (crates/store, tests/tests/store.rs); memcached
# for ip_throttle's shared state (issue 14, later).
ci/install-deps.sh nginx-light redis-server redis-tools memcached
if [ "${1:-}" = "--no-run" ]; then
    cargo test --workspace --locked --no-run
    # The plugin .so files the integration tests load, built as
    # tests/src/plugins.rs builds them on first use: same profile, same
    # packages (so the same features), hence fresh when the tests ask.
    cargo build --locked -p throttle -p rate_limit -p ip_throttle -p ats-probe
    exit 0
fi
cargo test --workspace --locked
