#!/usr/bin/env bash
# Installs the release artefacts of ci/package.sh (target/dist/) on this
# machine as an operator would, and exercises what was installed, never the
# build tree (docs/packages.md):
#
#   1. lintian on both .deb files: any error or warning fails, but for the
#      overrides each package ships (packaging/lintian/, with their reasons);
#   2. `apt-get install ./…deb` (dpkg, with the dependencies from apt);
#      upstream's plugins are unchanged (dpkg -V); then tests/tests/package.rs's
#      deb_* tests: Debian's traffic_server 9.2 loads the installed plugins by
#      the documented remap line and limits as configured, and the installed
#      example configs load; dthrottled starts from the installed binary and
#      config as its unit would (no systemd needed); `systemd-analyze verify`
#      passes on the installed unit;
#   3. the ATS 10 tarball, its sha256 checked, unpacked into a temporary
#      prefix beside ATS 10's own files (ATS_PREFIX, default /opt/ats10), and
#      the tarball_* test: a 10.1 traffic_server loads it by the same line;
#   4. `dpkg -r`: every file gone but dthrottled's conffile, upstream's
#      rate_limit.so still there, no warning; `dpkg -P`: the conffile and the
#      unit's enablement gone too.
#
# As root only (it installs packages); lintian, systemd (for systemd-analyze)
# and the rest are installed if missing. A failure purges the packages again.
# Every test binary is asked to run its exact count of tests, so a renamed
# test cannot pass by running nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/ats-env.sh

if [ "$(id -u)" -ne 0 ]; then
    echo "error: ci/package-test.sh installs the packages: run it as root" >&2
    exit 1
fi
ats10_prefix="${ATS_PREFIX:-$ATS10_DEFAULT_PREFIX}"
unset ATS_PREFIX
dist=target/dist
version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)"
arch="$(dpkg --print-architecture)"
plugins_deb="$dist/ats-throttle-plugins_$version-1_$arch.deb"
dthrottled_deb="$dist/dthrottled_$version-1_$arch.deb"
tarball="$(cd "$dist" && ls ats-throttle-plugins-"$version"-ats10.*-bookworm-"$arch".tar.gz)"
for f in "$plugins_deb" "$dthrottled_deb" "$dist/$tarball" "$dist/$tarball.sha256"; do
    [ -f "$f" ] || { echo "error: $f missing: run ci/package.sh first" >&2; exit 1; }
done

# lintian; systemd for systemd-analyze; util-linux's setpriv starts dthrottled
# as its unit would.
env ATS_PREFIX="$ats10_prefix" ci/install-deps.sh --ats10 lintian systemd util-linux

tmp="$(mktemp -d "${TMPDIR:-/tmp}/package-test.XXXXXX")"
own_policy=false
cleanup() {
    local rc=$?
    if $own_policy; then rm -f /usr/sbin/policy-rc.d; fi
    if dpkg-query -W -f='${Status}\n' ats-throttle-plugins dthrottled 2>/dev/null | grep -q -e installed -e config-files; then
        echo "package-test: purging the packages after a failure"
        dpkg -P ats-throttle-plugins dthrottled >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT

# cargo test's summary line must say `want` tests passed.
run_tests() {
    local want="$1"
    shift
    "$@" 2>&1 | tee "$tmp/out"
    grep -q "^test result: ok\. $want passed; 0 failed" "$tmp/out" || {
        echo "error: expected $want tests to pass in: $*" >&2
        exit 1
    }
}

echo "== lintian"
lintian --fail-on error,warning --display-info "$plugins_deb" "$dthrottled_deb"

echo "== install"
# A copy left by an earlier run (the same version would not be reinstalled).
if dpkg-query -W -f='${Status}\n' ats-throttle-plugins dthrottled 2>/dev/null | grep -q -e installed -e config-files; then
    dpkg -P ats-throttle-plugins dthrottled
fi
# Where systemd runs, the postinst would start dthrottled on its port, which
# the test needs: policy-rc.d (honoured by deb-systemd-invoke) says no.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=true
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "./$plugins_deb" "./$dthrottled_deb"
if $own_policy; then rm -f /usr/sbin/policy-rc.d; own_policy=false; fi
# No file of upstream's plugins (their rate_limit.so) was replaced.
changed="$(dpkg -V trafficserver-experimental-plugins)"
[ -z "$changed" ] || { echo "error: upstream's plugins changed: $changed" >&2; exit 1; }
getent passwd dthrottled >/dev/null || { echo "error: no dthrottled user after install" >&2; exit 1; }

# Debian's 9.2 (ATS_PREFIX unset): the deb_* tests. The test binary is the
# harness's (tests/); --workspace resolves features as ci/test.sh's
# `cargo test --workspace` did, so only this test target compiles.
cargo test --locked --workspace --test package --no-run
run_tests 3 cargo test --locked --workspace --test package -- --ignored --nocapture deb_

echo "== ATS 10 tarball: $tarball"
(cd "$dist" && sha256sum -c "$tarball.sha256")
prefix="$tmp/prefix"
mkdir -p "$prefix"
tar -C "$prefix" -xzf "$dist/$tarball"
# The rest of an ATS 10 install, linked in from ATS_PREFIX: the prefix is
# then what an operator's is after unpacking the tarball into it.
for d in bin lib include; do
    ln -s "$ats10_prefix/$d" "$prefix/$d"
done
for d in libexec/trafficserver etc/trafficserver; do
    mkdir -p "$prefix/$d"
    for e in "$ats10_prefix/$d"/*; do
        [ -e "$prefix/$d/$(basename "$e")" ] || ln -s "$e" "$prefix/$d/"
    done
done
run_tests 1 env ATS_PREFIX="$prefix" cargo test --locked --workspace --test package -- --ignored --nocapture tarball_

echo "== remove"
dpkg -r ats-throttle-plugins dthrottled 2>&1 | tee "$tmp/remove"
fail() { echo "error: $*" >&2; exit 1; }
if grep -qi warning "$tmp/remove"; then fail "dpkg -r warned"; fi
for gone in /usr/lib/trafficserver/modules/ats-throttle /usr/share/doc/ats-throttle-plugins \
    /usr/sbin/dthrottled /lib/systemd/system/dthrottled.service /usr/share/doc/dthrottled \
    /usr/share/man/man8/dthrottled.8.gz; do
    [ ! -e "$gone" ] || fail "$gone is left after dpkg -r"
done
[ -f /usr/lib/trafficserver/modules/rate_limit.so ] || fail "upstream's rate_limit.so is gone"
[ -f /etc/dthrottled/dthrottled.conf ] || fail "dpkg -r removed the conffile (only a purge should)"
# A package without conffiles is forgotten at once; dthrottled keeps its
# conffile, and dpkg its state, until the purge.
if dpkg-query -W -f='${Status}\n' ats-throttle-plugins 2>/dev/null | grep -qv not-installed; then
    fail "dpkg still lists ats-throttle-plugins after dpkg -r"
fi
[ "$(dpkg-query -W -f='${Status}' dthrottled)" = "deinstall ok config-files" ] ||
    fail "dthrottled is not in config-files state after dpkg -r"
dpkg -P dthrottled
for gone in /etc/dthrottled /etc/systemd/system/dthrottled.service \
    /etc/systemd/system/multi-user.target.wants/dthrottled.service; do
    [ ! -e "$gone" ] && [ ! -L "$gone" ] || fail "$gone is left after dpkg -P"
done
if dpkg-query -W -f='${Status}\n' dthrottled 2>/dev/null | grep -qv not-installed; then
    fail "dpkg still lists dthrottled after dpkg -P"
fi
echo "package-test: installed, exercised, removed and purged cleanly"
