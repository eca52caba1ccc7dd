#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds dist/gradsync_<version>_<arch>.deb from the Bazel outputs: the
# daemon, gradsyncctl, gradsync_bench, libgradsync.so with its headers and a
# pkg-config file, the systemd unit, sysusers and tmpfiles entries, an
# example config (a conffile) and man pages made by help2man from --help.
# Depends: comes from dpkg-shlibdeps over the binaries, nothing more (CUDA
# and NCCL are loaded at run time when present).
#   packaging/deb/build_deb.sh [OUT_DIR]      (default: dist/)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${1:-$root/dist}
scripts/install_deps.sh
bazel build //:gradsyncd //:gradsyncctl //:gradsync_bench //:libgradsync >/dev/null

version=$(packaging/version.sh)
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
work=$(mktemp -d /tmp/gradsync-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
pkg=$work/gradsync
mkdir -p "$pkg/DEBIAN"

put() {  # put MODE SOURCE DEST: install a file into the package tree
  install -D -m "$1" "$2" "$pkg/$3"
}
put 0755 bazel-bin/daemon/exe/gradsyncd usr/sbin/gradsyncd
put 0755 bazel-bin/tools/gradsyncctl/gradsyncctl usr/bin/gradsyncctl
put 0755 bazel-bin/tools/bench/gradsync_bench usr/bin/gradsync_bench
put 0644 bazel-bin/client/libgradsync.so "usr/lib/$multiarch/libgradsync.so"
for h in client/include/gradsync/*.h client/include/gradsync/*.hpp; do
  put 0644 "$h" "usr/include/gradsync/$(basename "$h")"
done
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$pkg/usr/sbin/gradsyncd" "$pkg/usr/bin/gradsyncctl" "$pkg/usr/bin/gradsync_bench" \
  "$pkg/usr/lib/$multiarch/libgradsync.so"

mkdir -p "$pkg/usr/lib/$multiarch/pkgconfig"
cat >"$pkg/usr/lib/$multiarch/pkgconfig/gradsync.pc" <<PC
prefix=/usr
libdir=\${prefix}/lib/$multiarch
includedir=\${prefix}/include

Name: gradsync
Description: client of gradsyncd, the node-local gradient synchronisation daemon (C ABI and C++ wrapper)
Version: $version
Libs: -L\${libdir} -lgradsync
Cflags: -I\${includedir}
PC

# The unit runs the packaged binary; the repository's runs /usr/local/bin's.
sed 's|^ExecStart=/usr/local/bin/gradsyncd |ExecStart=/usr/sbin/gradsyncd |' deploy/systemd/gradsyncd.service \
  >"$work/gradsyncd.service"
put 0644 "$work/gradsyncd.service" lib/systemd/system/gradsyncd.service
put 0644 deploy/systemd/gradsync.sysusers.conf usr/lib/sysusers.d/gradsync.conf
cat >"$work/tmpfiles.conf" <<'TMP'
# /run/gradsync for the daemon's sockets (the unit's RuntimeDirectory makes
# it too) and its timeline directory.
d /run/gradsync 0750 gradsync gradsync -
d /var/lib/gradsync 0750 gradsync gradsync -
d /var/lib/gradsync/timelines 0750 gradsync gradsync -
TMP
put 0644 "$work/tmpfiles.conf" usr/lib/tmpfiles.d/gradsync.conf
put 0644 deploy/systemd/gradsyncd.textproto etc/gradsync/gradsyncd.textproto

# Man pages from the programs' own help.
mkdir -p "$pkg/usr/share/man/man8" "$pkg/usr/share/man/man1"
help2man -N -s 8 -n "node-local gradient synchronisation daemon" --version-string="$version" \
  --no-discard-stderr "$pkg/usr/sbin/gradsyncd" | gzip -9n >"$pkg/usr/share/man/man8/gradsyncd.8.gz"
help2man -N -s 1 -n "ask gradsyncd what it and its jobs are doing" --version-string="$version" \
  --no-discard-stderr "$pkg/usr/bin/gradsyncctl" | gzip -9n >"$pkg/usr/share/man/man1/gradsyncctl.1.gz"
help2man -N -s 1 -n "collective benchmark through a running gradsyncd" --version-string="$version" \
  --no-discard-stderr "$pkg/usr/bin/gradsync_bench" | gzip -9n >"$pkg/usr/share/man/man1/gradsync_bench.1.gz"

doc=$pkg/usr/share/doc/gradsync
mkdir -p "$doc"
cp packaging/deb/copyright "$doc/copyright"
printf 'gradsync (%s) unstable; urgency=medium\n\n  * Package built from the repository by packaging/deb/build_deb.sh.\n\n -- gradsync maintainers <gradsync@lists.gradsync.dev>  %s\n' \
  "$version" "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}")" | gzip -9n >"$doc/changelog.gz"

# Depends: from the binaries' shared libraries (dpkg-shlibdeps wants a
# debian/control beside it).
mkdir -p "$work/src/debian"
printf 'Source: gradsync\n\nPackage: gradsync\nArchitecture: any\n' >"$work/src/debian/control"
depends=$(cd "$work/src" && dpkg-shlibdeps -O "$pkg/usr/sbin/gradsyncd" "$pkg/usr/bin/gradsyncctl" \
  "$pkg/usr/bin/gradsync_bench" "$pkg/usr/lib/$multiarch/libgradsync.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build_deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

installed_size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: gradsync
Version: $version
Architecture: $arch
Maintainer: gradsync maintainers <gradsync@lists.gradsync.dev>
Installed-Size: $installed_size
Depends: $depends, adduser
Recommends: systemd
Suggests: python3-torch
Section: net
Priority: optional
Homepage: https://github.com/gradsync/gradsync
Description: node-local gradient synchronisation daemon for data-parallel training
 gradsyncd runs on every node and performs the collectives of training
 jobs (allreduce, allgather, broadcast, alltoall, reducescatter) for their
 processes, which hand tensors over through shared memory or CUDA IPC: tensor
 fusion, negotiation, elastic membership, timelines, across nodes over UCX.
 This package holds the daemon with its systemd unit, gradsyncctl,
 gradsync_bench and the client library libgradsync.so (C ABI and C++).
 CUDA and NCCL are used when present; the Python client is the gradsync wheel.
CONTROL
echo /etc/gradsync/gradsyncd.textproto >"$pkg/DEBIAN/conffiles"
echo "activate-noawait ldconfig" >"$pkg/DEBIAN/triggers"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$pkg/DEBIAN/"
(cd "$pkg" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$pkg/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/gradsync_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"
