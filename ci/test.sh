#!/usr/bin/env bash
# Runs every test: unit and property tests of the pure crates, and the
# integration tests that start real traffic_server instances on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
cargo test --workspace --locked
