#!/usr/bin/env bash
# Builds both plugins and runs Traffic Server on 127.0.0.1:${PORT:-8080} with
# them on example rules and a demo origin; prints curl lines to try.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/build-plugins.sh
cargo build --release --locked -p ats-tests --bin ats-demo
ATS_PLUGIN_DIR="$(pwd)/target/plugins" exec target/release/ats-demo --port "${PORT:-8080}" --dir target/demo
