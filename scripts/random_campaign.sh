#!/usr/bin/env bash
# A long campaign of the randomized differential check
# (tests/integration/random_test.cc) with fresh seeds: random setups of 2-5
# daemons x 1-3 ranks, random programs of collectives, half of them with one
# fault. Prints each failing seed's replay command, then the totals: seeds,
# wrong results, hangs, errors that name no cause, the slowest named error.
#
#   scripts/random_campaign.sh [SEEDS [FIRST]]   (default: 200 seeds from a
#                                                  time-based first seed)
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-200}"
first="${2:-$(( $(date +%s) % 100000000 * 1000 ))}"
last=$(( first + count - 1 ))
echo "random campaign: seeds ${first}-${last}"
bazel build //tests/integration:random_test >/dev/null 2>&1
set +e
bazel test //tests/integration:random_test --nocache_test_results --test_output=errors \
  --test_timeout=86400 --test_env=GRADSYNC_RANDOM_SEEDS="${first}-${last}" >/dev/null 2>&1
rc=$?
set -e
log="$(bazel info bazel-testlogs 2>/dev/null)/tests/integration/random_test/test.log"
grep -E '^replay: ' "$log" || true
seeds=$(grep -cE '^seed [0-9]+: ' "$log" || true)
failed=$(grep -cE '^  FAILED in ' "$log" || true)
wrong=$(grep -c 'WRONG RESULT' "$log" || true)
hangs=$(grep -c 'was still waiting' "$log" || true)
unnamed=$(grep -c 'names no rank, node or host' "$log" || true)
faults=$(grep -cE '^seed [0-9]+: .*fault (kill|stop)' "$log" || true)
slowest=$(grep -oE '^  rank [0-9]+ \(daemon [0-9]+\) after [0-9.]+ s' "$log" | awk '{print $(NF-1)}' | sort -g | tail -1)
echo "seeds ${seeds} (${faults} with a fault), failed ${failed}: wrong results ${wrong}, hangs ${hangs}," \
  "unnamed errors ${unnamed}; slowest named error ${slowest:-none} s after its fault (log: ${log})"
exit "$rc"
