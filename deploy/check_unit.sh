#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Verifies deploy/systemd/gradsyncd.service with `systemd-analyze verify`.
#
#   deploy/check_unit.sh <path-to-gradsyncd-binary> [unit-file]
#
# verify insists that ExecStart's binary exists, so the unit is copied to a
# temporary directory with "ExecStart=/usr/local/bin/gradsyncd " rewritten to
# the given binary (e.g. bazel-bin/daemon/exe/gradsyncd, or /bin/true to check
# the unit alone). verify exits 0 even on unknown keys, so its output decides:
# any line naming the unit is a failure, and so is any line that is neither
# about another unit of this machine nor also printed for a trivial baseline
# unit (noise such as no systemd as PID 1 in a container); those are shown
# and ignored.
# Exit codes: 0 clean, 1 the unit has problems, 64 bad usage.
set -euo pipefail

usage() {
  echo "usage: $0 <path-to-gradsyncd-binary> [unit-file]" >&2
  exit 64
}

[[ $# -ge 1 && $# -le 2 ]] || usage
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
unit=${2:-$here/systemd/gradsyncd.service}
name=$(basename "$unit")

command -v systemd-analyze > /dev/null || { echo "$0: systemd-analyze not found (package systemd)" >&2; exit 64; }
[[ -f $unit ]] || { echo "$0: no unit file $unit" >&2; exit 64; }
binary=$(readlink -f -- "$1") || true
[[ -n $binary && -f $binary && -x $binary ]] || { echo "$0: $1 is not an executable file" >&2; exit 64; }
# The path goes into a sed replacement and a unit file: keep it plain.
[[ $binary =~ ^/[A-Za-z0-9._/+-]+$ ]] || { echo "$0: unsupported characters in path $binary" >&2; exit 64; }

placeholder='^ExecStart=/usr/local/bin/gradsyncd '
if ! grep -q -- "$placeholder" "$unit"; then
  echo "$0: FAIL: $unit has no line matching '$placeholder' to rewrite" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
sed "s|$placeholder|ExecStart=$binary |" "$unit" > "$tmp/$name"

verify() {
  SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no -- "$1" 2>&1
}

# What verify says about a trivial unit here is noise of this machine.
printf '[Service]\nExecStart=%s\n' "$binary" > "$tmp/gs-check-baseline.service"
baseline=$(verify "$tmp/gs-check-baseline.service" || true)

set +e
output=$(verify "$tmp/$name")
rc=$?
set -e

# A line fails when it names our unit, or when it is neither baseline noise
# nor about some other unit ("foo.target: ...", "/lib/systemd/.../foo.mount:").
other_unit='^(/[^:]*/)?[-A-Za-z0-9@._\\]+\.(service|socket|target|device|mount|automount|swap|timer|path|slice|scope)[: ]'
failures=()
ignored=()
while IFS= read -r line; do
  [[ -n $line ]] || continue
  if [[ $line == *"$name"* ]]; then
    failures+=("${line//$tmp\//}")
  elif grep -q -x -F -- "$line" <<< "$baseline" || [[ $line =~ $other_unit ]]; then
    ignored+=("$line")
  else
    failures+=("$line")
  fi
done <<< "$output"

if [[ ${#ignored[@]} -gt 0 ]]; then
  echo "ignored (about other units of this machine):" >&2
  printf '  %s\n' "${ignored[@]}" >&2
fi
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "FAIL: systemd-analyze verify complains about $unit:" >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
if [[ $rc -ne 0 && ${#ignored[@]} -eq 0 ]]; then
  echo "FAIL: systemd-analyze verify exited $rc without a message" >&2
  exit 1
fi
echo "OK: $unit (ExecStart -> $binary; systemd-analyze exit $rc)"
