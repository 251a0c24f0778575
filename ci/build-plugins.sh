#!/usr/bin/env bash
# Builds the plugins (release) and places them as throttle.so, rate_limit.so
# and ip_throttle.so, the names remap.config refers to, in
#   target/plugins/                    Debian's 9.2 (ATS_PREFIX unset), or
#   target/plugins-<MAJOR>.<MINOR>/    the ATS install at ATS_PREFIX, e.g.
#                                      ATS_PREFIX=/opt/ats10 → target/plugins-10.1/
# (the version read from the headers; cargo then builds in target/ats<MAJOR>
# unless CARGO_TARGET_DIR is set: see ci/ats-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
. ci/ats-env.sh
ats_env
echo "building the plugins for $ats_flavour"
cargo build --release --locked -p throttle -p rate_limit -p ip_throttle
mkdir -p "$PLUGINS_DIR"
cp "$TARGET/release/libthrottle.so" "$PLUGINS_DIR/throttle.so"
cp "$TARGET/release/librate_limit.so" "$PLUGINS_DIR/rate_limit.so"
cp "$TARGET/release/libip_throttle.so" "$PLUGINS_DIR/ip_throttle.so"
dir="$(pwd)/$PLUGINS_DIR"
echo "built for Traffic Server $ats_version: $dir/throttle.so $dir/rate_limit.so $dir/ip_throttle.so"
