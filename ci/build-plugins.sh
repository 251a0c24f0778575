#!/usr/bin/env bash
# Builds both plugins (release) and places them as target/plugins/throttle.so
# and target/plugins/rate_limit.so, the names remap.config refers to.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p throttle -p rate_limit
mkdir -p target/plugins
cp "$TARGET/release/libthrottle.so" target/plugins/throttle.so
cp "$TARGET/release/librate_limit.so" target/plugins/rate_limit.so
echo "built: $(pwd)/target/plugins/throttle.so $(pwd)/target/plugins/rate_limit.so"
