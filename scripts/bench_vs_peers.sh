#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gradsync_bench and the peers of ../shared/bench/peers (PyTorch Gloo, Open MPI
# over shared memory with and without MALLOC_MMAP_THRESHOLD_) in the same run,
# REPS times interleaved, 2 ranks, float32 sum. Logs and a summary go to OUT.
#   scripts/bench_vs_peers.sh [PEERS_DIR]     (REPS=2 OUT=/tmp/gradsync-vs-peers)
# Needs python3-torch, python3-numpy, openmpi-bin, python3-mpi4py (apt).
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${1:-../shared/bench/peers}
REPS=${REPS:-2}
OUT=${OUT:-/tmp/gradsync-vs-peers}
MIN_TIME=${MIN_TIME:-1}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/peers.XXXXXX)
cp -r "$PEERS"/. "$work"/
bazel build //:gradsyncd //:gradsync_bench
dir=$(mktemp -d /tmp/gradsync-bench.XXXXXX)
bazel-bin/daemon/exe/gradsyncd --socket-path "$dir/d.sock" --log-level warn &
daemon_pid=$!
trap 'kill -TERM $daemon_pid; wait $daemon_pid; rm -rf "$dir" "$work"' EXIT
for _ in $(seq 100); do [ -S "$dir/d.sock" ] && break; sleep 0.05; done
bench="bazel-bin/tools/bench/gradsync_bench --socket $dir/d.sock -np 2"
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 2"
NOMMAP="-x MALLOC_MMAP_THRESHOLD_=4294967296 -x MALLOC_TRIM_THRESHOLD_=4294967296"
for rep in $(seq 1 "$REPS"); do
  echo "$(date +%T) rep $rep"
  $bench --min-time "$MIN_TIME" > "$OUT/gradsync-zerocopy_r$rep.log"
  $bench --min-time "$MIN_TIME" --copy > "$OUT/gradsync-copy_r$rep.log"
  $bench --resnet --steps 15 > "$OUT/gradsync-resnet-zerocopy_r$rep.log"
  $bench --resnet --steps 15 --copy > "$OUT/gradsync-resnet-copy_r$rep.log"
  (cd "$work" && /usr/bin/python3 allreduce_sweep.py --backend gloo -n 2 --min-time "$MIN_TIME" --label gloo) > "$OUT/gloo_r$rep.log" 2>&1
  (cd "$work" && $MPIRUN /usr/bin/python3 allreduce_sweep.py --backend mpi --min-time "$MIN_TIME" --label mpi-sm) > "$OUT/mpi-sm_r$rep.log" 2>&1
  (cd "$work" && $MPIRUN $NOMMAP /usr/bin/python3 allreduce_sweep.py --backend mpi --min-time "$MIN_TIME" --label mpi-sm-nommap) > "$OUT/mpi-sm-nommap_r$rep.log" 2>&1
  (cd "$work" && /usr/bin/python3 resnet_allreduce.py --backend gloo -n 2 --steps 15 --label gloo) > "$OUT/resnet-gloo_r$rep.log" 2>&1
  (cd "$work" && $MPIRUN /usr/bin/python3 resnet_allreduce.py --backend mpi --steps 15 --label mpi-sm) > "$OUT/resnet-mpi-sm_r$rep.log" 2>&1
done
echo "$(date +%T) done; CSV lines:"
grep -h "^CSV" "$OUT"/*.log | sort
