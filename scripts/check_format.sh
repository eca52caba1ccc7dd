#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a tracked C or C++ file differs from what clang-format
# (.clang-format at the root) makes of it; prints the first differences.
# `scripts/check_format.sh --fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.c' '*.cu')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/gradsync-format.$$; then
  head -40 /tmp/gradsync-format.$$ >&2
  echo "check_format: $(grep -c 'error:' /tmp/gradsync-format.$$) lines differ from clang-format; run scripts/check_format.sh --fix" >&2
  rm -f /tmp/gradsync-format.$$
  exit 1
fi
rm -f /tmp/gradsync-format.$$
echo "check_format: ${#files[@]} files as clang-format makes them"
