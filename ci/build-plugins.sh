#!/usr/bin/env bash
# Builds the plugins (release) and places them as target/plugins/throttle.so,
# target/plugins/rate_limit.so and target/plugins/ip_throttle.so, the names
# remap.config refers to.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p throttle -p rate_limit -p ip_throttle
mkdir -p target/plugins
cp "$TARGET/release/libthrottle.so" target/plugins/throttle.so
cp "$TARGET/release/librate_limit.so" target/plugins/rate_limit.so
cp "$TARGET/release/libip_throttle.so" target/plugins/ip_throttle.so
echo "built: $(pwd)/target/plugins/throttle.so $(pwd)/target/plugins/rate_limit.so $(pwd)/target/plugins/ip_throttle.so"
