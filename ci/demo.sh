#!/usr/bin/env bash
# Builds both plugins and runs Traffic Server on 127.0.0.1:${PORT:-8080} with
# them on example rules and a demo origin; prints curl lines to try.
# Ctrl-C, SIGTERM (timeout, docker stop) or SIGHUP stops it and every
# process it started.
#
#   ci/demo.sh --build-only   builds what the demo runs, then exits (the
#                             Docker image does this, so `docker run` serves at once)
#
# Debian's 9.2 by default; ATS_PREFIX=/opt/ats10 ci/demo.sh runs ATS 10 with
# plugins built for it (ci/ats-env.sh: its own target dir and plugin dir;
# its runroot in target/demo-10.1 instead of target/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/build-plugins.sh
. ci/ats-env.sh
ats_env
cargo build --release --locked -p ats-tests --bin ats-demo
if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
# exec: signals reach ats-demo itself, which stops traffic_server with it.
ATS_PLUGIN_DIR="$(pwd)/$PLUGINS_DIR" exec "$TARGET/release/ats-demo" --port "${PORT:-8080}" --dir "${PLUGINS_DIR/plugins/demo}"
