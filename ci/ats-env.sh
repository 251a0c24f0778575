# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the scripts that source this
# Sourced by ci/build-plugins.sh, ci/test.sh, ci/bench.sh, ci/demo.sh and
# .ci/run: which Traffic Server a build is for, and where its outputs go.
# After `. ci/ats-env.sh`, call `ats_env` (once the headers are installed):
#
#   ATS_PREFIX unset   Debian's 9.2: headers found where ats-sys/build.rs
#                      looks (/usr/include, /usr/local/include,
#                      /opt/trafficserver/include); cargo's target dir is the
#                      caller's (CARGO_TARGET_DIR, else target/); plugins go
#                      to target/plugins/.
#   ATS_PREFIX=DIR     an ATS install such as /opt/ats10 (ci/install-ats10.sh):
#                      built against DIR/include. Unless the caller set
#                      CARGO_TARGET_DIR, cargo builds into target/ats<MAJOR>
#                      (exported), so both flavours stay built side by side;
#                      plugins go to target/plugins-<MAJOR>.<MINOR>/.
#   ATS_INCLUDE_DIR    as for ats-sys/build.rs: these headers win over both.
#
# The version comes from the headers the build reads (TS_VERSION_MAJOR,
# _MINOR, _MICRO in ts/apidefs.h), never from a guess. ats_env sets
# ats_include, ats_version (e.g. 10.1.4), ats_major, ats_minor,
# ats_flavour (one line for headers and logs), TARGET (cargo's target dir)
# and PLUGINS_DIR; it returns 1 with a message when there are no headers.
# `ats_env --beside`, for a script that builds both flavours in one run
# (ci/test.sh, .ci/run): with ATS_PREFIX and a CARGO_TARGET_DIR the caller
# set, builds in CARGO_TARGET_DIR/ats<MAJOR>, so the flavours do not
# rebuild over each other.

ATS10_DEFAULT_PREFIX=/opt/ats10

# Prints MAJOR.MINOR.MICRO read from DIR/ts/apidefs.h.
ats_header_version() {
    local f="$1/ts/apidefs.h" field v out=""
    for field in MAJOR MINOR MICRO; do
        v="$(sed -n "s/^#define[[:space:]]\{1,\}TS_VERSION_${field}[[:space:]]\{1,\}\([0-9]\{1,\}\).*/\1/p" "$f" 2>/dev/null | head -n1)"
        if [ -z "$v" ]; then
            echo "error: no TS_VERSION_${field} in $f" >&2
            return 1
        fi
        out="${out:+$out.}$v"
    done
    echo "$out"
}

# The directory holding ts/ts.h that ats-sys/build.rs will use.
ats_include_dir() {
    if [ -n "${ATS_INCLUDE_DIR:-}" ]; then
        [ -f "$ATS_INCLUDE_DIR/ts/ts.h" ] && { echo "$ATS_INCLUDE_DIR"; return 0; }
        echo "error: ATS_INCLUDE_DIR=$ATS_INCLUDE_DIR does not contain ts/ts.h" >&2
        return 1
    fi
    if [ -n "${ATS_PREFIX:-}" ]; then
        [ -f "$ATS_PREFIX/include/ts/ts.h" ] && { echo "$ATS_PREFIX/include"; return 0; }
        echo "error: ATS_PREFIX=$ATS_PREFIX has no include/ts/ts.h; point it at an ATS install prefix" \
            "(ATS 10: ci/install-ats10.sh installs one at $ATS10_DEFAULT_PREFIX)" >&2
        return 1
    fi
    local d
    for d in /usr/include /usr/local/include /opt/trafficserver/include; do
        [ -f "$d/ts/ts.h" ] && { echo "$d"; return 0; }
    done
    echo "error: Traffic Server plugin headers (ts/ts.h) not found; install trafficserver-dev" \
        "(ci/install-deps.sh) or set ATS_PREFIX to an ATS install (ATS 10: ATS_PREFIX=$ATS10_DEFAULT_PREFIX)" >&2
    return 1
}

# shellcheck disable=SC2120  # ats_env takes an option, not the script's arguments
ats_env() {
    # Empty means unset (ats-sys would take an empty ATS_PREFIX as a prefix).
    if [ -z "${ATS_PREFIX:-}" ]; then unset ATS_PREFIX; fi
    if [ -z "${ATS_INCLUDE_DIR:-}" ]; then unset ATS_INCLUDE_DIR; fi
    ats_include="$(ats_include_dir)" || return 1
    ats_version="$(ats_header_version "$ats_include")" || return 1
    ats_major="${ats_version%%.*}"
    ats_minor="${ats_version#*.}"
    ats_minor="${ats_minor%%.*}"
    # Absolute: cargo resolves a relative CARGO_TARGET_DIR against the
    # directory it runs in, and trybuild (crates/ats's compile-fail tests)
    # runs it in the crate's own directory.
    case "${CARGO_TARGET_DIR:-}" in
    '' | /*) ;;
    *) export CARGO_TARGET_DIR="$PWD/$CARGO_TARGET_DIR" ;;
    esac
    if [ -n "${ATS_PREFIX:-}" ]; then
        if [ -z "${CARGO_TARGET_DIR:-}" ]; then
            export CARGO_TARGET_DIR="$PWD/target/ats$ats_major"
        elif [ "${1:-}" = --beside ]; then
            export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/ats$ats_major"
        fi
        PLUGINS_DIR="target/plugins-$ats_major.$ats_minor"
        ats_flavour="Traffic Server $ats_version (ATS_PREFIX=$ATS_PREFIX, headers $ats_include)"
    else
        PLUGINS_DIR="target/plugins"
        ats_flavour="Traffic Server $ats_version (headers $ats_include)"
    fi
    TARGET="${CARGO_TARGET_DIR:-target}"
}

# Wall time per part, for scripts that run several: `timed NAME CMD...`
# prints a header line (NAME and CMD), runs CMD (under the caller's `set -e`:
# a failure ends the script) and records its time under NAME; `print_times
# WHAT` (from an EXIT trap) prints them all, a part that did not finish
# marked as such.
TIMES=()
CURRENT_PART=""
CURRENT_START=0
_fmt_time() { printf '%-52s %3dm%02ds%s' "$1" $(($2 / 60)) $(($2 % 60)) "${3:-}"; }
timed() {
    local name="$1"
    shift
    echo "==== $name: $*"
    CURRENT_PART="$name"
    CURRENT_START=$SECONDS
    "$@"
    TIMES+=("$(_fmt_time "$name" $((SECONDS - CURRENT_START)))")
    CURRENT_PART=""
}
print_times() {
    local t
    if [ -n "$CURRENT_PART" ]; then
        TIMES+=("$(_fmt_time "$CURRENT_PART" $((SECONDS - CURRENT_START)) "  (failed or interrupted)")")
        CURRENT_PART=""
    fi
    [ ${#TIMES[@]} -gt 0 ] || return 0
    echo "==== wall time, $1"
    for t in "${TIMES[@]}"; do echo "  $t"; done
    echo "  $(_fmt_time total "$SECONDS")"
}
