#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds dist/gradsync-<version>-py3-none-manylinux_2_36_x86_64.whl: the
# Python package with libgradsync.so and the shared libraries it needs
# beyond glibc, libstdc++ and libgcc_s (gRPC, protobuf, abseil, ...).
#   packaging/wheel/build_wheel.sh [OUT_DIR]      (default: dist/)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$PWD/dist}
scripts/install_deps.sh
bazel build //:libgradsync >/dev/null
version=$(packaging/version.sh)
lib=$(mktemp -d /tmp/gradsync-wheel.XXXXXX)
trap 'rm -rf "$lib"' EXIT
install -m 0755 bazel-bin/client/libgradsync.so "$lib/"
strip --strip-unneeded "$lib/libgradsync.so"
scripts/bundle_shared_libs.sh "$lib" "$lib/libgradsync.so"
/usr/bin/python3 packaging/wheel/build_wheel.py "$version" client/python/gradsync "$lib" "$out"
