#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch's own distributed suite (torch.testing._internal.distributed.
# distributed_test, as test/distributed/test_distributed_spawn.py runs it for
# Gloo) on the CPU, once on Gloo and once on gradsync (the same tests: every
# group the suite asks Gloo for is a gradsync one), on PyPI's torch
# (scripts/pypi_torch_env.sh). Prints each backend's totals and the tests
# Gloo passes that gradsync does not. Slow: at world size 2 on 2 cores, about
# 18 minutes on Gloo and 41 on gradsync (docs/torch_distributed.md).
#
#   scripts/torch_suite.sh [WORLD_SIZE [PYTEST -k EXPRESSION]]
#     default: 2 ranks, every test; the suite's *_group tests need 8:
#     scripts/torch_suite.sh 8 _group
set -euo pipefail
cd "$(dirname "$0")/.."
world="${1:-2}"
filter="${2:-}"
env_dir="$(scripts/pypi_torch_env.sh)"
source "$env_dir/env.sh"
# What torch's test helpers import beside torch.
"$PYTHON" -c "import expecttest" 2>/dev/null || "$PYTHON" -m pip install -q expecttest
bazel build //client:libgradsync.so //daemon/exe:gradsyncd >/dev/null 2>&1
bin="$(bazel info bazel-bin 2>/dev/null)"
export GRADSYNC_LIBRARY="$bin/client/libgradsync.so" GRADSYNC_DAEMON="$bin/daemon/exe/gradsyncd"
export PYTHONPATH="$PWD/client/python" PYTHONDONTWRITEBYTECODE=1
export GRADSYNC_DAEMON_ARGS="--stall-warning-seconds=5 --stall-deadline-seconds=60"
export BACKEND=gloo WORLD_SIZE="$world" DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="${DISTRIBUTED_TESTS_DEFAULT_TIMEOUT:-120}"
out="${GRADSYNC_SUITE_OUT:-/tmp/gradsync-torch-suite}"
mkdir -p "$out"
args=(-p no:cacheprovider -q -rA "$PWD/client/python/torch_suite/distributed_suite.py")
[ -n "$filter" ] && args+=(-k "$filter")
for target in gloo gradsync; do
  export GRADSYNC_SUITE_BACKEND="$target" TEMP_DIR="$(mktemp -d)"
  echo "== $target, world size $world${filter:+, -k $filter}"
  (cd "$TEMP_DIR" && "$PYTHON" -m pytest "${args[@]}" > "$out/$target-$world.txt" 2>&1) || true
  tail -1 "$out/$target-$world.txt"
  { grep -E '^PASSED ' "$out/$target-$world.txt" || true; } | sed 's/^PASSED //' | sort > "$out/$target-$world.passed"
  rm -rf "$TEMP_DIR"
done
echo "passed on Gloo, not on gradsync:"
comm -23 "$out/gloo-$world.passed" "$out/gradsync-$world.passed" | sed 's/.*:://; s/^/  /'
echo "passed on gradsync, not on Gloo:"
comm -13 "$out/gloo-$world.passed" "$out/gradsync-$world.passed" | sed 's/.*:://; s/^/  /'
echo "logs: $out"
