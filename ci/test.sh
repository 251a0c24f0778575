#!/usr/bin/env bash
# Runs every test: unit and property tests of the pure crates, and the
# integration tests that start real traffic_server instances on loopback,
# against Traffic Server 9.2 (Debian's) and then 10.1:
#
#   1. ATS 9.2: `cargo test --workspace --locked`, everything.
#   2. ATS 10:  the packages that depend on the ATS version (ats-sys, ats,
#      the plugins, the probe plugin, the integration tests) built against
#      ATS_PREFIX (default /opt/ats10) in target/ats10 (ci/ats-env.sh). The
#      pure crates never see a TS header and already ran in part 1.
#
#   ci/test.sh             both; part 2 if ATS 10 is installed or installable
#                          (ci/install-ats10.sh: from ../shared/ats, or ATS10_DIST)
#   ci/test.sh --ats 9     part 1 only       (or TEST_ATS=9)
#   ci/test.sh --ats 10    part 2 only; ATS 10 is then required (or TEST_ATS=10)
#   ci/test.sh --no-run    builds everything both parts run and load, runs
#                          nothing (the Docker image does this, so `docker run`
#                          tests without compiling); combines with --ats
#   ci/test.sh -- ARGS     passes ARGS to each part's `cargo test`, e.g.
#                          `-- --test foundation` runs that test target only,
#                          from the same build (ci/docker-test.sh does this);
#                          the test binaries' own flags after another `--`
#
# ATS_PREFIX     where ATS 10 is (default /opt/ats10; set, it must hold one);
#                part 1 always uses Debian's 9.2, whatever ATS_PREFIX says.
# ATS10_DIST     the folder with ATS 10's tarballs (default ../shared/ats).
# CI=true        ATS 10 must be there or installable: otherwise this fails
#                (without CI and without the tarballs, part 2 is skipped
#                with a one-line note saying how to add it).
# CARGO_TARGET_DIR  part 1 builds there (default target/), part 2 in its
#                ats10/ subdirectory (default target/ats10).
# Prints a header line before each part and each part's wall time at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/ats-env.sh

which="${TEST_ATS:-all}"
no_run=false
cargo_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-run) no_run=true ;;
        --ats) which="${2:?--ats needs 9, 10 or all}"; shift ;;
        --ats=*) which="${1#--ats=}" ;;
        --) shift; cargo_args=("$@"); break ;;
        *) echo "usage: ci/test.sh [--no-run] [--ats 9|10|all] [-- CARGO_TEST_ARGS...]" >&2; exit 2 ;;
    esac
    shift
done
if $no_run && [ ${#cargo_args[@]} -gt 0 ]; then
    echo "error: --no-run builds everything; it takes no cargo test arguments" >&2
    exit 2
fi
case "$which" in
    9 | 9.2) want9=true; want10=false ;;
    10 | 10.1) want9=false; want10=true ;;
    all) want9=true; want10=true ;;
    *) echo "error: --ats/TEST_ATS must be 9, 10 or all, not '$which'" >&2; exit 2 ;;
esac

ats10_prefix="${ATS_PREFIX:-$ATS10_DEFAULT_PREFIX}"
ats10_asked="${ATS_PREFIX:-}"
ats10_dist="$(realpath -m "${ATS10_DIST:-../shared/ats}")"
unset ATS_PREFIX
# Each would win over ATS_PREFIX (headers in ats-sys, plugins in the
# harness) and mix one version's build into the other's run.
for v in ATS_INCLUDE_DIR ATS_PLUGIN_DIR; do
    if [ -n "${!v:-}" ]; then
        echo "error: $v is set; ci/test.sh chooses each version's headers and plugins itself (unset it)" >&2
        exit 2
    fi
done
# The ATS-version-dependent packages; the others are pure and ran in part 1.
ATS_PACKAGES=(-p ats-sys -p ats -p throttle -p rate_limit -p rate_limit_global -p ip_throttle -p ats-probe -p ats-tests)
# nginx: the side-by-side test against limit_req (tests/tests/keyed_nginx.rs);
# redis-server: the store tests (crates/store, tests/tests/store.rs);
# memcached for ip_throttle's shared state; python3-h2 (the HTTP/2 client of
# tests/h2/client.py, run by /usr/bin/python3) and openssl (its test
# certificate) for tests/tests/http2.rs.
DEPS=(nginx-light redis-server redis-tools memcached python3-h2 openssl)

trap 'print_times "ci/test.sh"' EXIT

run10=false
if $want10; then
    # Required (fails if missing) under CI, with --ats 10, or with ATS_PREFIX set.
    if ATS_PREFIX="$ats10_prefix" ci/install-ats10.sh --installed \
        || [ "${CI:-}" = true ] || ! $want9 || [ -n "$ats10_asked" ] \
        || [ -f "$ats10_dist/ats-10.1.4-bookworm-amd64.tar.xz" ] \
        || [ -f "$ats10_dist/trafficserver-10.1.4.tar.xz" ]; then
        run10=true
    fi
fi
if $run10; then
    # A failure here (ATS 10 neither there nor installable) fails the run.
    timed "install (ATS 9.2, tools, ATS 10)" \
        env ATS_PREFIX="$ats10_prefix" ci/install-deps.sh --ats10 "${DEPS[@]}"
else
    timed "install (ATS 9.2, tools)" ci/install-deps.sh "${DEPS[@]}"
fi

part9() {
    ats_env
    if $no_run; then
        timed "build for ATS $ats_version (headers $ats_include)" build9
    else
        timed "tests on ATS $ats_version (headers $ats_include)" cargo test --workspace --locked "${cargo_args[@]}"
    fi
}
build9() {
    echo "cargo test --workspace --locked --no-run; cargo build --locked -p throttle -p rate_limit -p ip_throttle -p ats-probe"
    cargo test --workspace --locked --no-run
    # The plugin .so files the integration tests load, built as
    # tests/src/plugins.rs builds them on first use: same profile, same
    # packages (so the same features), hence fresh when the tests ask.
    cargo build --locked -p throttle -p rate_limit -p ip_throttle -p ats-probe
}

part10() {
    export ATS_PREFIX="$ats10_prefix"
    # target/ats10, or CARGO_TARGET_DIR/ats10 if the caller gave one: both
    # flavours stay built rather than part 2 rebuilding over part 1.
    ats_env --beside
    local where="$ATS_PREFIX, $CARGO_TARGET_DIR"
    if $no_run; then
        timed "build for ATS $ats_version ($where)" build10
    else
        timed "tests on ATS $ats_version ($where)" cargo test --locked "${ATS_PACKAGES[@]}" "${cargo_args[@]}"
    fi
}
build10() {
    echo "cargo test --locked --no-run ${ATS_PACKAGES[*]}; cargo build --locked -p throttle -p rate_limit -p ip_throttle -p ats-probe"
    cargo test --locked --no-run "${ATS_PACKAGES[@]}"
    cargo build --locked -p throttle -p rate_limit -p ip_throttle -p ats-probe
}

if $want9; then
    part9
fi
if $run10; then
    part10
elif $want10; then
    echo "ATS 10 not tested: put ats-10.1.4-bookworm-amd64.tar.xz in $ats10_dist (or set ATS10_DIST), or set ATS_PREFIX to an ATS 10 install"
fi
