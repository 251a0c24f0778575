#!/usr/bin/env bash
# Checks the Docker image (docker/Dockerfile) as a new user would use it:
# builds the ATS 10.1 flavour (Debian's 9.2 and /opt/ats10) from this
# working tree, then inside it runs
#   1. the compile-fail tests and an integration test target (foundation:
#      each plugin loads and proxies, parked transactions, reloads, panics)
#      on Traffic Server 9.2, then that target on 10.1, from what
#      `docker build` compiled (ci/test.sh --ats N -- --test ...); the whole
#      suite is `docker run` with no command (26.5 min here: not in CI);
#   2. the demo on ATS 10: it must serve and limit as documented, and
#      `docker stop` must end it at once (well before its 10 s SIGKILL).
# Prints the image's size and each part's wall time.
#
#   ci/docker-test.sh               as above; fails if Docker cannot be used
#   ci/docker-test.sh --if-available
#                                   as .ci/run calls it: one line and exit 0
#                                   when Docker cannot be used (no daemon and
#                                   none can be started: not root, no apt,
#                                   dockerd fails; no ATS 10 tarballs)
#
# The daemon: `docker info` must work, or as root this installs Debian's
# docker.io (Docker 20.10 on bookworm; its classic builder builds the
# image) and starts dockerd without iptables or a bridge, stopped again at
# the end. Builds and runs use --network host (everything is on loopback).
# The base image rust:1.95.0-bookworm: used if present, else pulled, else
# made locally by ../shared/docker/make-rust-base.sh (RUST_BASE_SCRIPT).
# The ATS 10 tarballs come from ATS10_DIST (default ../shared/ats), copied
# into the build context's ats-dist/ as the Dockerfile says.
#
# DOCKER_TEST_TAG  the image's tag (default ats-throttle:10.1).
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/ats-env.sh

if_available=false
case "${1:-}" in
    --if-available) if_available=true ;;
    "") ;;
    *) echo "usage: ci/docker-test.sh [--if-available]" >&2; exit 2 ;;
esac
TAG="${DOCKER_TEST_TAG:-ats-throttle:10.1}"
BASE=rust:1.95.0-bookworm
DIST="$(realpath -m "${ATS10_DIST:-../shared/ats}")"
BASE_SCRIPT="${RUST_BASE_SCRIPT:-../shared/docker/make-rust-base.sh}"
work="$(mktemp -d "${TMPDIR:-/tmp}/docker-test.XXXXXX")"
ctx="$work/context"
started_dockerd=""
# Containers this script started, removed at the end whatever happens.
containers=()
TESTS_NAME="ats-throttle-tests-$$"
DEMO_NAME="ats-throttle-demo-$$"
# Bounds (here: base image 3.5 min, build 8-9 min, each test run < 1 min).
APT_TIMEOUT=600
BASE_TIMEOUT=1200
BUILD_TIMEOUT=2400
TESTS_TIMEOUT=900

cleanup() {
    local c
    for c in "${containers[@]}"; do
        docker rm -f "$c" >/dev/null 2>&1 || true
    done
    if [ -n "$started_dockerd" ]; then
        kill "$started_dockerd" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$started_dockerd" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$started_dockerd" 2>/dev/null || true
    fi
    rm -rf "$work"
    print_times "ci/docker-test.sh"
}
trap cleanup EXIT
# A signal ends the script through the EXIT trap (bash skips it otherwise).
trap 'exit 143' TERM
trap 'exit 130' INT

# Not usable: fail, or with --if-available say so in one line and succeed.
unavailable() {
    if $if_available; then
        echo "Docker image not tested: $1"
        TIMES=()
        CURRENT_PART=""
        exit 0
    fi
    echo "error: $1" >&2
    exit 1
}

ensure_daemon() {
    local tool
    for tool in curl git tar timeout /usr/bin/python3; do
        command -v "$tool" >/dev/null || unavailable "no $tool here"
    done
    for f in BUILD.md ats-10.1.4-bookworm-amd64.tar.xz; do
        [ -f "$DIST/$f" ] || unavailable "no $DIST/$f for the ATS 10 image (set ATS10_DIST)"
    done
    if timeout 30 docker info >/dev/null 2>&1; then
        return
    fi
    [ "$(id -u)" -eq 0 ] || unavailable "no Docker daemon, and not root to start one"
    if ! command -v dockerd >/dev/null; then
        command -v apt-get >/dev/null || unavailable "no Docker daemon, and no apt-get to install one"
        echo "installing Debian's docker.io for its daemon"
        DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT" apt-get update -qq >/dev/null \
            && DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT" apt-get install -y -qq docker.io >/dev/null \
            || unavailable "installing docker.io failed"
    fi
    command -v docker >/dev/null || unavailable "no docker CLI (docker.io installs one)"
    dockerd --iptables=false --ip6tables=false --bridge=none >"$work/dockerd.log" 2>&1 &
    started_dockerd=$!
    for _ in $(seq 1 60); do
        timeout 10 docker info >/dev/null 2>&1 && return
        kill -0 "$started_dockerd" 2>/dev/null || break
        sleep 0.5
    done
    tail -5 "$work/dockerd.log" >&2 || true
    unavailable "dockerd did not start (its log is above)"
}

ensure_base() {
    docker image inspect "$BASE" >/dev/null 2>&1 && return
    if timeout 60 docker pull -q "$BASE" >/dev/null 2>&1; then
        return
    fi
    [ -x "$BASE_SCRIPT" ] || unavailable "no $BASE image, no registry, and no $BASE_SCRIPT to make one"
    echo "no registry: making $BASE with $BASE_SCRIPT"
    # It needs what this machine may lack (a Debian mirror for debootstrap,
    # the pinned toolchain in ~/.rustup): an environment, not a defect here.
    if ! timeout -k 30 "$BASE_TIMEOUT" "$BASE_SCRIPT" >"$work/base.log" 2>&1; then
        tail -20 "$work/base.log" >&2
        unavailable "$BASE_SCRIPT could not make $BASE (its output is above)"
    fi
}

# The build context in $ctx: the working tree's files that git tracks or
# would (not target/ or fuzz's), and the ATS 10 tarballs in ats-dist/.
context() {
    local f
    mkdir -p "$ctx/ats-dist"
    git ls-files -z --cached --others --exclude-standard >"$work/files"
    # Deleted but not yet committed files are listed too: skip them.
    while IFS= read -r -d '' f; do
        if [ -e "$f" ]; then printf '%s\0' "$f"; fi
    done <"$work/files" >"$work/present"
    tar --null -T "$work/present" -cf "$work/context.tar"
    tar -C "$ctx" -xf "$work/context.tar"
    cp "$DIST/BUILD.md" "$DIST/ats-10.1.4-bookworm-amd64.tar.xz" "$ctx/ats-dist/"
}

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The demo on ATS 10: serves, limits as its banner says (rate.demo:
# --limit=2 --queue=4, so of 8 slow requests at once 2 are refused), and
# `docker stop` ends it within 2 s.
demo_check() {
    local port code codes i t0 took pids=()
    local demo="$DEMO_NAME"
    port="$(free_port)"
    containers+=("$demo")
    docker run -d --name "$demo" --network host -e PORT="$port" -e ATS_PREFIX=/opt/ats10 \
        "$TAG" ci/demo.sh >/dev/null
    for i in $(seq 1 120); do
        code="$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Host: rate.demo' "http://127.0.0.1:$port/" || true)"
        [ "$code" = 200 ] && break
        [ "$(docker inspect -f '{{.State.Running}}' "$demo")" = true ] || break
        sleep 0.5
    done
    if [ "$code" != 200 ]; then
        docker logs "$demo" 2>&1 | tail -20 >&2
        echo "error: the demo did not serve on port $port" >&2
        exit 1
    fi
    echo "demo: served after $((i / 2)) s"
    for i in $(seq 8); do
        curl -s -m 20 -o /dev/null -w '%{http_code}\n' -H 'Host: rate.demo' -H 'X-Origin-Delay: 1000' \
            "http://127.0.0.1:$port/$i" >"$work/code.$i" &
        pids+=($!)
    done
    # These only: a bare wait would wait for a dockerd started here too.
    wait "${pids[@]}" || true
    codes="$(sort "$work"/code.* | tr '\n' ' ')"
    echo "demo: 8 slow requests at once to rate.demo: $codes"
    if [ "$codes" != "200 200 200 200 200 200 429 429 " ]; then
        echo "error: wanted 6 served (2 at once, 4 queued) and 2 refused" >&2
        exit 1
    fi
    t0=$(date +%s%N)
    docker stop "$demo" >/dev/null
    took=$((($(date +%s%N) - t0) / 1000000))
    echo "demo: docker stop took $took ms, exit code $(docker inspect -f '{{.State.ExitCode}}' "$demo")"
    [ "$took" -lt 2000 ] || { echo "error: docker stop took $took ms (the demo ignored SIGTERM?)" >&2; exit 1; }
}

ensure_daemon
echo "Docker: $(docker version -f 'client {{.Client.Version}}, daemon {{.Server.Version}}')"
timed "base image $BASE" ensure_base
context
build() {
    if ! timeout -k 30 "$BUILD_TIMEOUT" docker build --network host -f "$ctx/docker/Dockerfile" --build-arg ATS_VERSION=10.1 \
        -t "$TAG" "$ctx" >"$work/build.log" 2>&1; then
        tail -40 "$work/build.log" >&2
        echo "error: docker build failed (the end of its output is above)" >&2
        exit 1
    fi
    # The image this tag named before, if any, is left dangling: not kept.
    docker image prune -f >/dev/null 2>&1 || true
}
timed "docker build ($TAG)" build
size="$(docker image inspect -f '{{.Size}}' "$TAG")"
echo "image $TAG: $((size / 1000000)) MB"
# docker run, removed at the end whatever happens.
in_image() {
    local name="$TESTS_NAME-$1"
    shift
    containers+=("$name")
    timeout -k 30 "$TESTS_TIMEOUT" docker run --init --rm --name "$name" --network host "$TAG" "$@"
}
timed "docker run: compile-fail and foundation tests on 9.2" \
    in_image 9 ci/test.sh --ats 9 -- --test compile_fail --test foundation
timed "docker run: foundation tests on 10.1" \
    in_image 10 ci/test.sh --ats 10 -- --test foundation
timed "docker run: the demo on ATS 10, then docker stop" demo_check
