#!/usr/bin/env bash
# Builds every release artefact into target/dist/ (docs/packages.md):
#
#   ats-throttle-plugins_V-1_amd64.deb  the three plugins for Debian bookworm's
#                                       Traffic Server 9.2, in
#                                       /usr/lib/trafficserver/modules/ats-throttle/
#   dthrottled_V-1_amd64.deb            the daemon, its systemd unit and
#                                       /etc/dthrottled/dthrottled.conf (a conffile)
#   ats-throttle-plugins-V-ats10.1-bookworm-amd64.tar.gz (+ .sha256)
#                                       the plugins built for ATS 10.1, laid out
#                                       relative to an ATS prefix
#   SHA256SUMS                          of all of them
#
# V is the workspace's version ([workspace.package] in Cargo.toml).
#
# dpkg-deb from staged trees rather than cargo-deb: nothing to install
# beyond Debian's dpkg-dev (cargo-deb would be a new tool to build and pin),
# one script makes both packages and the ATS 10 tarball the same way, and
# what goes where (the module subdirectory, the conffile, the unit, the
# maintainer scripts) reads here rather than in Cargo.toml metadata.
#
# The 9.2 plugins are the release build ci/build-plugins.sh and the bench
# make (same packages, same target/), so an earlier one is reused; the 10.1
# build is in target/ats10 (ci/ats-env.sh), against ATS_PREFIX (default
# /opt/ats10, installed by ci/install-ats10.sh if missing). As root the
# tools are installed if missing (ci/install-deps.sh); otherwise it says
# which. SOURCE_DATE_EPOCH (default: the last commit's time) dates every
# file, so the same tree gives the same packages.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
. ci/ats-env.sh

ats10_prefix="${ATS_PREFIX:-$ATS10_DEFAULT_PREFIX}"
unset ATS_PREFIX
# dpkg-dev: dpkg-shlibdeps; binutils: strip.
env ATS_PREFIX="$ats10_prefix" ci/install-deps.sh --ats10 dpkg-dev binutils gzip

version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)"
if [ -z "$version" ]; then
    echo "error: no version in Cargo.toml's [workspace.package]" >&2
    exit 1
fi
debrev=1
arch="$(dpkg --print-architecture)"
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
maintainer="${DEBFULLNAME:-$(git log -1 --format=%an 2>/dev/null || echo maintainers)} <${DEBEMAIL:-$(git log -1 --format=%ae 2>/dev/null || echo root@localhost)}>"
# The module subdirectory: beside upstream's plugins, clashing with none
# (upstream's rate_limit.so is in trafficserver-experimental-plugins).
SUBDIR=ats-throttle
PLUGINS=(rate_limit throttle ip_throttle)
DOCS=(README.md docs/packages.md docs/rate_limit.md docs/throttle.md docs/ip_throttle.md docs/traffic-server-10.md)

dist="$repo/target/dist"
work="$repo/target/package"
rm -rf "$dist" "$work"
mkdir -p "$dist" "$work"

# ---- builds -----------------------------------------------------------------
ats_env
if [ "$ats_major" != 9 ]; then
    echo "error: the .deb is for Debian's Traffic Server 9.2, but the default headers are $ats_version ($ats_include)" >&2
    exit 1
fi
ts92="$ats_version"
ts92_next="$ats_major.$((ats_minor + 1))"
target92="$TARGET"
echo "== release build for $ats_flavour"
cargo build --release --locked -p throttle -p rate_limit -p ip_throttle
# Apart: with the plugins in one cargo call, feature unification could make
# their build differ from ci/build-plugins.sh's and the bench's.
cargo build --release --locked -p dthrottled

saved_target="${CARGO_TARGET_DIR-}" had_target="${CARGO_TARGET_DIR+set}"
export ATS_PREFIX="$ats10_prefix"
ats_env --beside
if [ "$ats_major" != 10 ]; then
    echo "error: ATS_PREFIX=$ATS_PREFIX has Traffic Server $ats_version headers, not 10.x" >&2
    exit 1
fi
ts10="$ats_version"
ts10_line="$ats_major.$ats_minor"
target10="$TARGET"
echo "== release build for $ats_flavour"
cargo build --release --locked -p throttle -p rate_limit -p ip_throttle
unset ATS_PREFIX CARGO_TARGET_DIR
if [ -n "$had_target" ]; then export CARGO_TARGET_DIR="$saved_target"; fi

# Exported only now: cargo reruns ats-sys's build script (the cc crate
# watches it) when it changes, which would rebuild the plugins the bench built.
export SOURCE_DATE_EPOCH="$epoch"

# ---- helpers ----------------------------------------------------------------
# install_file MODE SRC DEST: copies, sets the mode.
install_file() {
    mkdir -p "$(dirname "$3")"
    cp "$2" "$3"
    chmod "$1" "$3"
}
# Stripped as dh_strip does (debug info and unneeded symbols out, the GNU
# build-id kept: the plugins tell copies of one build by it).
install_stripped() {
    install_file "$1" "$2" "$3"
    strip --strip-unneeded --remove-section=.comment "$3"
}
# Docs: gzip -9n past 4 KiB, as dh_compress does.
install_doc() {
    install_file 0644 "$1" "$2"
    if [ "$(stat -c %s "$2")" -gt 4096 ]; then
        gzip -9nf "$2"
    fi
}
# The licence of the tree and of every crate linked into the packages'
# binaries (cargo tree: normal dependencies only, no build tools).
write_copyright() {
    local out="$1"
    shift
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: ats-throttle"
        echo "Comment: Throttling plugins for Apache Traffic Server, and dthrottled."
        echo "  Built from this source tree by ci/package.sh. The Rust crates below are"
        echo "  linked into the binaries (name, version, licence as each declares it)."
        echo "  ."
        (cd "$repo" && cargo tree --locked --offline -e normal --prefix none --format '{p} {l}' "$@" |
            grep -v -e '(proc-macro)' -e '^$' |
            sed -e 's/ (\*)$//' -e 's/ (\/[^)]*)//' -e 's/  */ /g' | sort -u | sed 's/^/  /')
        echo
        echo "Files: *"
        echo "Copyright: $(date -u -d "@$SOURCE_DATE_EPOCH" +%Y) the ats-throttle authors"
        echo "License: Apache-2.0"
        echo
        echo "License: Apache-2.0"
        echo " On Debian systems, the full text of the Apache License, Version 2.0"
        echo " is in /usr/share/common-licenses/Apache-2.0."
    } >"$out"
    chmod 0644 "$out"
}
# changelog.Debian.gz: one entry, pointing at the release notes.
write_debian_changelog() {
    local pkg="$1" out="$2"
    {
        echo "$pkg ($version-$debrev) bookworm; urgency=medium"
        echo
        echo "  * Release $version: see changelog.gz (docs/changelog.md)."
        echo
        echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
    } | gzip -9n >"$out"
    chmod 0644 "$out"
}
# Each package's tree, dated SOURCE_DATE_EPOCH, with DEBIAN/md5sums (of all
# but conffiles, as dh_md5sums) and the installed size.
finish_tree() {
    local root="$1" conffiles="${2:-}"
    (cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\n' | LC_ALL=C sort |
        while read -r f; do
            if [ -z "$conffiles" ] || ! grep -qx "/$f" <<<"$conffiles"; then
                md5sum "$f"
            fi
        done) >"$root/DEBIAN/md5sums"
    chmod 0644 "$root/DEBIAN/md5sums"
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}
installed_size() {
    du -s -k --apparent-size --exclude=DEBIAN "$1" | cut -f1
}
# dpkg-shlibdeps' Depends for the ELF files given (relative to the package
# root, from work/, as it expects debian/<package>/...).
shlibs() {
    local pkg="$1"
    shift
    mkdir -p "$work/debian"
    : >"$work/debian/control"
    (cd "$work" && dpkg-shlibdeps -O "${@/#/debian/$pkg/}" | sed -n 's/^shlibs:Depends=//p')
}
build_deb() {
    local root="$1" out="$2"
    dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
    echo "built $out"
}

# ---- ats-throttle-plugins (Debian, Traffic Server 9.2) ----------------------
pkg=ats-throttle-plugins
root="$work/debian/$pkg"
for p in "${PLUGINS[@]}"; do
    install_stripped 0644 "$target92/release/lib$p.so" "$root/usr/lib/trafficserver/modules/$SUBDIR/$p.so"
done
doc="$root/usr/share/doc/$pkg"
for d in "${DOCS[@]}"; do
    install_doc "$d" "$doc/$(basename "$d")"
done
install_doc docs/changelog.md "$doc/changelog"
for e in packaging/examples/*; do
    install_file 0644 "$e" "$doc/examples/$(basename "$e")"
done
write_copyright "$doc/copyright" -p throttle -p rate_limit -p ip_throttle
write_debian_changelog "$pkg" "$doc/changelog.Debian.gz"
install_file 0644 "packaging/lintian/$pkg" "$root/usr/share/lintian/overrides/$pkg"
mkdir -p "$root/DEBIAN"
sos=()
for p in "${PLUGINS[@]}"; do sos+=("usr/lib/trafficserver/modules/$SUBDIR/$p.so"); done
# The Traffic Server line the plugins were built for, and no other: a
# build for one line cannot load in another (docs/packages.md).
depends="trafficserver (>= ${ts92%.*}), trafficserver (<< $ts92_next), $(shlibs "$pkg" "${sos[@]}")"
finish_tree "$root"
cat >"$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $version-$debrev
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(installed_size "$root")
Depends: $depends
Enhances: trafficserver
Section: web
Priority: optional
Description: throttling plugins for Apache Traffic Server ${ts92%.*}, in Rust
 Three remap plugins for Traffic Server ${ts92%.*} (built against $ts92), in
 /usr/lib/trafficserver/modules/$SUBDIR/, named in remap.config as
 @plugin=$SUBDIR/NAME.so:
  - rate_limit.so: concurrency and rate limits per rule or per client, a
    FIFO queue, fair shares, fleet-wide limits (peers, Redis), dry run,
    and, in plugin.config, TLS connections per SNI at the client hello;
  - throttle.so: bounds uncached requests, serving stale copies when full;
  - ip_throttle.so: Perlbal's Throttle (per-IP delays and bans).
 Upstream's rate_limit.so (trafficserver-experimental-plugins) is left as
 it is. Documentation and example configurations are in
 /usr/share/doc/$pkg.
EOF
chmod 0644 "$root/DEBIAN/control"
touch -d "@$SOURCE_DATE_EPOCH" "$root/DEBIAN/control"
build_deb "$root" "$dist/${pkg}_$version-${debrev}_$arch.deb"

# ---- dthrottled (Debian) ----------------------------------------------------
pkg=dthrottled
root="$work/debian/$pkg"
install_stripped 0755 "$target92/release/dthrottled" "$root/usr/sbin/dthrottled"
install_file 0644 daemons/dthrottled/dthrottled.service "$root/lib/systemd/system/dthrottled.service"
install_file 0644 daemons/dthrottled/dthrottled.conf.example "$root/etc/dthrottled/dthrottled.conf"
install_file 0644 packaging/dthrottled.8 "$root/usr/share/man/man8/dthrottled.8"
gzip -9n "$root/usr/share/man/man8/dthrottled.8"
doc="$root/usr/share/doc/$pkg"
install_doc docs/dthrottled.md "$doc/README.md"
install_doc docs/changelog.md "$doc/changelog"
install_file 0644 daemons/dthrottled/dthrottled.conf.example "$doc/examples/dthrottled.conf.example"
write_copyright "$doc/copyright" -p dthrottled
write_debian_changelog "$pkg" "$doc/changelog.Debian.gz"
install_file 0644 "packaging/lintian/$pkg" "$root/usr/share/lintian/overrides/$pkg"
mkdir -p "$root/DEBIAN"
for s in postinst prerm postrm; do
    install_file 0755 "packaging/deb/dthrottled/$s" "$root/DEBIAN/$s"
done
conffiles="/etc/dthrottled/dthrottled.conf"
echo "$conffiles" >"$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"
finish_tree "$root" "$conffiles"
cat >"$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $version-$debrev
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(installed_size "$root")
Depends: adduser, init-system-helpers (>= 1.54~), $(shlibs "$pkg" usr/sbin/dthrottled)
Section: net
Priority: optional
Description: DThrottle distributed throttling daemon
 Answers throttling questions for applications other than Traffic Server:
 a client sends a tag (a client address, a token) and reads OK or NO.
 Instances share their buckets' hits over authenticated UDP, so a client
 behind a load balancer gets the configured rate across the fleet; the
 rate_limit.so plugin for Traffic Server speaks the same peer protocol.
 .
 Runs as the dthrottled user under systemd (dthrottled.service), from
 /etc/dthrottled/dthrottled.conf.
EOF
chmod 0644 "$root/DEBIAN/control"
touch -d "@$SOURCE_DATE_EPOCH" "$root/DEBIAN/control"
build_deb "$root" "$dist/${pkg}_$version-${debrev}_$arch.deb"

# ---- the ATS 10 tarball -----------------------------------------------------
# Paths relative to an ATS prefix, as ATS's own cmake install lays it out;
# only our own directories are members, so unpacking over an install
# creates them and touches no existing directory's owner or mode.
name="ats-throttle-plugins-$version-ats$ts10_line-bookworm-$arch"
root="$work/tarball"
members=("libexec/trafficserver/$SUBDIR" "etc/trafficserver/$SUBDIR" "share/doc/ats-throttle-plugins")
for p in "${PLUGINS[@]}"; do
    install_stripped 0644 "$target10/release/lib$p.so" "$root/libexec/trafficserver/$SUBDIR/$p.so"
done
for e in packaging/examples/*; do
    # .example: unpacking a later release never overwrites the operator's copy.
    install_file 0644 "$e" "$root/etc/trafficserver/$SUBDIR/$(basename "$e").example"
done
for d in "${DOCS[@]}" docs/changelog.md; do
    install_file 0644 "$d" "$root/share/doc/ats-throttle-plugins/$(basename "$d")"
done
write_copyright "$root/share/doc/ats-throttle-plugins/copyright" -p throttle -p rate_limit -p ip_throttle
echo "ats-throttle-plugins $version for Traffic Server $ts10_line (built against $ts10 on Debian bookworm, $arch)" \
    >"$root/share/doc/ats-throttle-plugins/BUILD-INFO"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$root" && find "${members[@]}" -print0 | LC_ALL=C sort -z |
    tar --null --no-recursion -T - --owner=0 --group=0 --numeric-owner --mode=u+w,go-w -cf - |
    gzip -9n >"$dist/$name.tar.gz")
(cd "$dist" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "built $dist/$name.tar.gz"

(cd "$dist" && sha256sum ./*.deb ./*.tar.gz | sed 's# \./# #' >SHA256SUMS)
echo "== target/dist (version $version; 9.2 build against $ts92, 10.1 build against $ts10):"
(cd "$dist" && ls -l)
