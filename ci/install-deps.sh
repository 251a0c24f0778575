#!/usr/bin/env bash
# Installs what building and testing need on Debian/Ubuntu: Traffic Server
# 9.2 (binaries, plugin headers, upstream's experimental plugins for the
# comparison tests), libclang for bindgen and g++ (ats-sys compiles a small
# C++ shim). As root it installs what is missing; otherwise it prints the
# exact command and fails.
# Used by ci/test.sh, ci/demo.sh, ci/bench.sh and docker/Dockerfile alike.
#
#   ci/install-deps.sh [--ats10] [PACKAGE...]
#
# --ats10, or ATS_PREFIX naming a prefix without include/ts/ts.h: also
# Traffic Server 10 at ${ATS_PREFIX:-/opt/ats10}, by ci/install-ats10.sh (an
# ATS 10 already there is used as it is; else the prebuilt tarball or the
# source from ATS10_DIST, default ../shared/ats beside this repository).
set -euo pipefail

ats10=false
if [ "${1:-}" = "--ats10" ]; then
    ats10=true
    shift
fi
if [ -n "${ATS_PREFIX:-}" ] && [ ! -f "$ATS_PREFIX/include/ts/ts.h" ]; then
    ats10=true
fi

# xz-utils unpacks the ATS 10 tarball; procps gives the harness kill(1).
PACKAGES=(trafficserver trafficserver-dev trafficserver-experimental-plugins libclang-dev clang g++ curl ca-certificates xz-utils procps)
PACKAGES+=("$@")

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
        echo "error: missing ${missing[*]} and no apt-get; install Traffic Server 9.2 with its plugin headers and libclang" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing packages: ${missing[*]}" >&2
        echo "install them with:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "installing: ${missing[*]}"
    apt-get update -qq
    # Packaged daemons must not start: tests run their own instances.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
fi

if $ats10; then
    "$(dirname "$0")/install-ats10.sh"
fi

if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    echo "error: no Rust toolchain; install one with:  curl https://sh.rustup.rs -sSf | sh -s -- -y" >&2
    exit 1
fi
