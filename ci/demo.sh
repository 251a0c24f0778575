#!/usr/bin/env bash
# Builds both plugins and runs Traffic Server on 127.0.0.1:${PORT:-8080} with
# them on example rules and a demo origin; prints curl lines to try.
# Ctrl-C, SIGTERM (timeout, docker stop) or SIGHUP stops it and every
# process it started.
#
#   ci/demo.sh --build-only   builds what the demo runs, then exits (the
#                             Docker image does this, so `docker run` serves at once)
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
ci/build-plugins.sh
cargo build --release --locked -p ats-tests --bin ats-demo
if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
# exec: signals reach ats-demo itself, which stops traffic_server with it.
ATS_PLUGIN_DIR="$(pwd)/target/plugins" exec "$TARGET/release/ats-demo" --port "${PORT:-8080}" --dir target/demo
