#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds dist/gradsync-<version>-py3-none-manylinux_2_36_x86_64.whl: the
# Python package with libgradsync.so, gradsyncd and gradsyncctl, and the
# shared libraries they need beyond glibc, libstdc++ and libgcc_s (gRPC,
# protobuf, abseil, UCX, ...); the binaries' RPATH is set to $ORIGIN.
#   packaging/wheel/build_wheel.sh [OUT_DIR]      (default: dist/)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$PWD/dist}
scripts/install_deps.sh
bazel build //:libgradsync //:gradsyncd //:gradsyncctl >/dev/null
version=$(packaging/version.sh)
lib=$(mktemp -d /tmp/gradsync-wheel.XXXXXX)
trap 'rm -rf "$lib"' EXIT
install -m 0755 bazel-bin/client/libgradsync.so bazel-bin/daemon/exe/gradsyncd \
  bazel-bin/tools/gradsyncctl/gradsyncctl "$lib/"
strip --strip-unneeded "$lib/libgradsync.so" "$lib/gradsyncd" "$lib/gradsyncctl"
patchelf --set-rpath '$ORIGIN' "$lib/gradsyncd" "$lib/gradsyncctl"
scripts/bundle_shared_libs.sh "$lib" "$lib/libgradsync.so" "$lib/gradsyncd" "$lib/gradsyncctl"
/usr/bin/python3 packaging/wheel/build_wheel.py "$version" client/python/gradsync "$lib" "$out"
