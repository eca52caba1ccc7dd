#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the .deb and the wheel and checks them without the build tree:
# lintian on the .deb (no errors), its files unpacked into a scratch root
# (dpkg -x) and gradsyncd from there, the wheel pip-installed into a fresh
# virtual environment (with the system's site packages, for Debian's torch),
# and a 2-rank training of examples/pytorch/train_digits.py run from
# outside the checkout by that environment's gradsyncrun against a private
# gradsyncd from the wheel itself (pip alone is enough on one machine).
# About a minute once Bazel's outputs exist.
# (Not checked here: a clean Debian root with apt and systemd.)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
deb=$(packaging/deb/build_deb.sh | tail -1)
wheel=$(packaging/wheel/build_wheel.sh | tail -1)
scratch=$(mktemp -d /tmp/gradsync-check.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
echo "== $deb ($(du -h "$deb" | cut -f1)), $wheel ($(du -h "$wheel" | cut -f1))"
if ! command -v lintian >/dev/null; then
  echo "check_packages: lintian is needed (scripts/install_deps.sh installs it)" >&2
  exit 1
fi
lintian "$deb" 2>&1 | grep -v 'running with root privileges' | tee "$scratch/lintian" || true
if grep -q '^E:' "$scratch/lintian"; then echo "lintian found errors" >&2; exit 1; fi
dpkg -x "$deb" "$scratch/root"
"$scratch/root/usr/sbin/gradsyncd" --version
"$scratch/root/usr/sbin/gradsyncd" --check-config --config-path "$scratch/root/etc/gradsync/gradsyncd.textproto" >/dev/null && echo "example config: valid"
/usr/bin/python3 -m venv --system-site-packages "$scratch/venv"
"$scratch/venv/bin/pip" install -q --no-index "$wheel"
cp examples/pytorch/train_digits.py "$scratch/"
cd "$scratch"
"$scratch/venv/bin/python" -c "import gradsync, gradsync._native as n; n.load_library(); print('gradsync from', gradsync.__file__)"
# pip alone is enough: the private daemon is the wheel's (nothing else on PATH).
"$scratch/venv/bin/gradsyncd" --version
env -u GRADSYNC_DAEMON -u GRADSYNC_CTL -u GRADSYNC_LIBRARY PATH="$scratch/venv/bin:/usr/bin:/bin" \
  "$scratch/venv/bin/gradsyncrun" --private-daemon -np 2 python train_digits.py | tail -2
[ "$PWD" != "$repo" ]
echo "check_packages: ok"
