#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The control plane of one job in one process, no daemons
# (daemon/peer/control_plane_bench.cc): per step of T allreduces by W ranks
# (8 per node), the leader's and a follower's time, the batch a follower
# receives, the largest message, and the heap. A benchmark, not a test.
#   scripts/bench_control_plane.sh [max W x T, default 700000]
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-700000}"
bazel build -c opt //daemon/peer:control_plane_bench >&2
for tensors in 16 161 1000; do
  for ranks in 64 512 4096 32768; do
    if ((ranks * tensors > budget)); then continue; fi
    bazel-bin/daemon/peer/control_plane_bench --ranks "$ranks" --tensors "$tensors" --steps 4
  done
done
