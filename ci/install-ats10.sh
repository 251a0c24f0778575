#!/usr/bin/env bash
# Makes sure Traffic Server 10 is installed at ${ATS_PREFIX:-/opt/ats10}, the
# install the ATS 10 build and tests use (ats-sys reads ATS_PREFIX/include,
# the test harness runs ATS_PREFIX/bin). Called by `ci/install-deps.sh --ats10`
# (ci/test.sh, .ci/run, docker/Dockerfile) and by ci/install-deps.sh when
# ATS_PREFIX names a prefix without headers. In order:
#
#   1. $ATS_PREFIX/bin/traffic_server reports 10.x and include/ts/ts.h is
#      there: used as it is (your own ATS 10 install: nothing else happens).
#   2. The prebuilt $ATS10_DIST/ats-10.1.4-bookworm-amd64.tar.xz, if its
#      sha256 is the one below (and BUILD.md's): the runtime libraries from
#      apt, then unpacked at / (it installs under /opt/ats10). Seconds.
#   3. Otherwise the source $ATS10_DIST/trafficserver-10.1.4.tar.xz (sha256
#      checked too), built with BUILD.md's apt build dependencies and exactly
#      its cmake flags, then `ninja install`. ~30 min on 2 cores: everything
#      is built, as `ninja install` installs every target of the build and
#      ATS 10.1.4's CMake has no install components to install a part of it.
#   Steps 2 and 3 install only to /opt/ats10 (where the build and the tarball
#   put it); another ATS_PREFIX without ATS 10 is an error.
#
#   ci/install-ats10.sh --installed   step 1 only: exit 0 if ATS 10 is
#                                     there, 1 if not; prints nothing.
#
# ATS10_DIST  the folder with the two tarballs (default: ../shared/ats beside
#             this repository, where CI and docker/Dockerfile put it).
# ATS10_ROOT  install under this root instead of / (a test of this script:
#             ATS10_ROOT=/tmp/r puts the install in /tmp/r/opt/ats10).
# As root it installs; otherwise it prints the exact commands and fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"

DEFAULT_PREFIX=/opt/ats10
PREFIX="${ATS_PREFIX:-$DEFAULT_PREFIX}"
DIST="$(realpath -m "${ATS10_DIST:-$repo/../shared/ats}")"
ROOT="${ATS10_ROOT:-}"
ROOT="${ROOT%/}"
PREBUILT=ats-10.1.4-bookworm-amd64.tar.xz
SOURCE=trafficserver-10.1.4.tar.xz
# The sums BUILD.md lists (kept here so that a changed file beside it is not
# trusted either).
PREBUILT_SHA256=1364d23bf267e8dc77bfe23b9f3c8c393620d24aa783b66cb90a026d57d1d8a8
SOURCE_SHA256=19d75d4cb2252553dde7d05a660ee002359f9ef02752a81e85594f87ca996d92
RUNTIME_PKGS=(libhwloc15 libpcre3 libpcre2-8-0 libcap2 libssl3 zlib1g liblzma5)
BUILD_PKGS=(cmake ninja-build g++ pkg-config libpcre3-dev libpcre2-dev libssl-dev zlib1g-dev
    libcap-dev libhwloc-dev libncurses-dev python3)
CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_REGRESSION_TESTING=OFF
    -DENABLE_VERIFY_PLUGINS=OFF -DENABLE_AUTEST=OFF -DBUILD_EXPERIMENTAL_PLUGINS=ON
    "-DCMAKE_INSTALL_PREFIX=$DEFAULT_PREFIX")

# "10.1.4" from `traffic_server --version`, empty if it does not run.
ts_version() {
    "$1/bin/traffic_server" --version 2>&1 |
        sed -n 's/.*Apache Traffic Server - traffic_server - \([0-9][0-9.]*\).*/\1/p' | head -n1
}
installed() {
    local p="$ROOT$PREFIX" v
    [ -x "$p/bin/traffic_server" ] && [ -f "$p/include/ts/ts.h" ] || return 1
    v="$(ts_version "$p")"
    [ "${v%%.*}" = 10 ]
}
sha_ok() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if [ "${1:-}" = "--installed" ]; then
    installed
    exit
fi

if installed; then
    echo "ATS 10: using $ROOT$PREFIX (Traffic Server $(ts_version "$ROOT$PREFIX"))"
    exit 0
fi
if [ "$PREFIX" != "$DEFAULT_PREFIX" ]; then
    if [ -x "$PREFIX/bin/traffic_server" ]; then
        echo "error: ATS_PREFIX=$PREFIX: bin/traffic_server reports '$(ts_version "$PREFIX")', not 10.x, or include/ts/ts.h is missing" >&2
    else
        echo "error: ATS_PREFIX=$PREFIX has no bin/traffic_server" >&2
    fi
    echo "ATS 10 installs from $DIST only to $DEFAULT_PREFIX: unset ATS_PREFIX, or point it at an ATS 10 install" >&2
    exit 1
fi

prebuilt="$DIST/$PREBUILT"
source="$DIST/$SOURCE"
if sha_ok "$prebuilt" "$PREBUILT_SHA256"; then
    how=prebuilt
elif sha_ok "$source" "$SOURCE_SHA256"; then
    how=source
    if [ -f "$prebuilt" ]; then
        echo "warning: $prebuilt does not have the sha256 BUILD.md lists; building from the source instead" >&2
    fi
else
    for f in "$prebuilt" "$source"; do
        if [ -f "$f" ]; then
            echo "error: $f does not have the sha256 BUILD.md lists" >&2
        fi
    done
    echo "error: no Traffic Server 10 at $ROOT$PREFIX, and neither $PREBUILT nor $SOURCE (with BUILD.md's sha256) in $DIST" >&2
    echo "put them there (or set ATS10_DIST to their folder), or set ATS_PREFIX to an ATS 10 install" >&2
    exit 1
fi

if [ "$(id -u)" -ne 0 ] && [ -z "$ROOT" ]; then
    echo "error: Traffic Server 10 is not installed at $PREFIX; install it as root with:" >&2
    if [ "$how" = prebuilt ]; then
        echo "  sudo apt-get update && sudo apt-get install -y ${RUNTIME_PKGS[*]}" >&2
        echo "  sudo tar -C / -xJf $prebuilt" >&2
    else
        echo "  sudo apt-get update && sudo apt-get install -y ${BUILD_PKGS[*]}" >&2
        echo "  tar -C /tmp -xJf $source && cd /tmp/trafficserver-10.1.4" >&2
        echo "  cmake -B build ${CMAKE_FLAGS[*]}" >&2
        echo "  ninja -C build -j$(nproc) && sudo ninja -C build install" >&2
    fi
    echo "(or run this script as root: sudo $0)" >&2
    exit 1
fi

start=$SECONDS
# The apt part of ci/install-deps.sh, without its ATS 10 step (no recursion).
if [ "$how" = prebuilt ]; then
    echo "ATS 10: installing $PREBUILT (sha256 ok) at ${ROOT:-/}"
    env -u ATS_PREFIX "$here/install-deps.sh" "${RUNTIME_PKGS[@]}"
    mkdir -p "$ROOT/"
    tar -C "$ROOT/" -xJf "$prebuilt"
else
    echo "ATS 10: building $SOURCE (sha256 ok) with BUILD.md's cmake flags; ~30 min on 2 cores"
    env -u ATS_PREFIX "$here/install-deps.sh" "${BUILD_PKGS[@]}" "${RUNTIME_PKGS[@]}"
    work="$(mktemp -d "${TMPDIR:-/tmp}/ats10-build.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    tar -C "$work" -xJf "$source"
    (
        cd "$work/trafficserver-10.1.4"
        cmake -B build "${CMAKE_FLAGS[@]}"
        ninja -C build -j"$(nproc)"
        DESTDIR="$ROOT" ninja -C build install
    )
fi
if ! installed; then
    echo "error: after installing, $ROOT$PREFIX/bin/traffic_server does not report 10.x:" >&2
    "$ROOT$PREFIX/bin/traffic_server" --version >&2 || true
    exit 1
fi
echo "ATS 10: installed $ROOT$PREFIX (Traffic Server $(ts_version "$ROOT$PREFIX")) in $((SECONDS - start)) s"
