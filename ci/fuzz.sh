#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for SECONDS each (default 20), one after
# the other, and fails on the first crash, hang (an input over 10 s),
# out-of-memory (2 GB RSS) or single allocation over 512 MB. The targets,
# what they check and how to run them longer: docs/architecture.md#fuzzing.
#
#   ci/fuzz.sh [SECONDS] [TARGET...]      # default: 20 s, every target
#
# Tool: cargo-fuzz with libFuzzer (libfuzzer-sys), on the pinned stable
# toolchain. `cargo fuzz build -s none` (no sanitizer) passes only stable
# codegen flags (the sancov pass and its -Cllvm-args), so no nightly is
# needed; the price is no AddressSanitizer, which the targets' safe Rust
# does not need. What is missing is installed: cargo-fuzz (pinned, by
# cargo install --locked) and, as root, g++ (libfuzzer-sys compiles libFuzzer).
#
# Each run starts from the committed corpus (fuzz/corpus/TARGET, read
# only) and adds what it finds to target/fuzz/corpus/TARGET; a crashing
# input is left in target/fuzz/artifacts/TARGET/ and shown in hex.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/ats-env.sh # timed, print_times
trap 'print_times "ci/fuzz.sh"' EXIT

CARGO_FUZZ_VERSION=0.13.2
secs="${1:-20}"
shift || true

if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v c++ >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: no C++ compiler (libfuzzer-sys builds libFuzzer); install it with:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y g++" >&2
        exit 1
    fi
    timed "install g++" bash -c 'apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null'
fi
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    timed "install cargo-fuzz $CARGO_FUZZ_VERSION" \
        cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# The fuzz crate is its own workspace with its own lock file: fail, as
# `--locked` does for the main workspace, if Cargo.lock is not up to date.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null
# Built in fuzz/target, where `cargo fuzz run` looks, whatever the caller's target dir.
unset CARGO_TARGET_DIR
build() { (cd fuzz && cargo fuzz build -s none); }
timed "build the fuzz targets" build

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
out=target/fuzz
failed=()
run() {
    local t=$1 log="$out/$1.log"
    mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
    if "$bin/$t" "$out/corpus/$t" "fuzz/corpus/$t" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units' "$log" || true
        return
    fi
    tail -n 40 "$log"
    for a in "$out/artifacts/$t"/*; do
        [ -f "$a" ] || continue
        echo "---- $a ($(stat -c %s "$a") bytes):"
        od -A d -t x1z "$a" | head -n 40
    done
    echo "error: fuzz target $t failed (log: $log; reproduce: cd fuzz && cargo fuzz run -s none $t ../$out/artifacts/$t/FILE)" >&2
    failed+=("$t")
}
for t in "${targets[@]}"; do
    timed "fuzz $t, $secs s" run "$t"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "error: fuzz targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs} s each, no crash"
