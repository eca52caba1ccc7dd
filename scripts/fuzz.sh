#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the fuzz targets (tests/fuzz) with clang, libFuzzer, ASan and UBSan
# and runs each for FUZZ_SECONDS (default 60) from its committed seed corpus.
# New inputs go to a scratch corpus under $OUT (default /tmp/gradsync-fuzz),
# never into the repository. A crash leaves crash-* in $OUT/<target>/: copy
# it to tests/fuzz/corpus/<target>/ to make it a regression test, then fix.
# Prints, per target: executions, coverage (edges) and features.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
OUT="${OUT:-/tmp/gradsync-fuzz}"
TARGETS="${TARGETS:-handoff_ring_fuzz enqueue_fuzz handoff_frame_fuzz peer_message_fuzz config_fuzz register_fuzz}"
command -v clang >/dev/null || { apt-get install -y -qq --no-install-recommends clang >/dev/null; }
labels=()
for t in $TARGETS; do labels+=("//tests/fuzz:$t"); done
bazel build --config=fuzz "${labels[@]}"
bin="$(bazel info --config=fuzz bazel-bin)/tests/fuzz"
failed=0
for t in $TARGETS; do
  work="$OUT/$t"
  mkdir -p "$work/corpus"
  cp -n tests/fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  log="$work/fuzz.log"
  if ! ASAN_OPTIONS=detect_leaks=1 "$bin/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 -rss_limit_mb=4096 \
      -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" >"$log" 2>&1; then
    failed=1
    echo "$t: FAILED (see $log and $work/crash-*)"
  fi
  execs=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -a -oE 'DONE +cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | sed 's/DONE *//' || true)
  echo "$t: ${SECONDS_PER_TARGET} s, ${execs} executions, ${cov:-cov: ?}, corpus $(ls "$work/corpus" | wc -l) inputs"
done
exit $failed
