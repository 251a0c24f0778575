#!/usr/bin/env bash
# Installs what building and testing need on Debian/Ubuntu: Traffic Server
# (binaries, plugin headers, upstream's experimental plugins for the
# comparison tests) and libclang for bindgen. As root it installs what is
# missing; otherwise it prints the exact command and fails.
# Used by ci/test.sh, ci/demo.sh, ci/bench.sh and docker/Dockerfile alike.
set -euo pipefail

PACKAGES=(trafficserver trafficserver-dev trafficserver-experimental-plugins libclang-dev clang curl ca-certificates)
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

if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    echo "error: no Rust toolchain; install one with:  curl https://sh.rustup.rs -sSf | sh -s -- -y" >&2
    exit 1
fi
