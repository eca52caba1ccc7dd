#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gradsync and the peers of ../shared/bench/peers in the same run, REPS times
# interleaved, float32 sum. Logs go to OUT; the CSV lines at the end.
#   scripts/bench_vs_peers.sh [MODE] [PEERS_DIR]     (REPS=2 OUT=/tmp/gradsync-vs-peers-MODE)
# MODE:
#   single  (default) 2 ranks, one daemon: gradsync_bench zero-copy and copy
#           (sweep and the ResNet-50 gradient set); PyTorch Gloo; Open MPI
#           over shared memory with and without MALLOC_MMAP_THRESHOLD_.
#   cross   2 daemons x 1 rank and 2 x 2 (NODES="2x1 2x2"), UCX_TLS=tcp over
#           loopback: gradsync_bench sweep and ResNet-50 set; Gloo and Open
#           MPI over TCP (btl tcp,self on lo).
#   e2e     examples/pytorch/pytorch_synthetic_benchmark.py, 2 ranks
#           (E2E_MODEL=resnet18, E2E_ARGS): gradsync across two daemons
#           (gradsyncrun, zero-copy and --copy) and on one daemon, and
#           PyTorch DDP over Gloo. Horovod is not run: it is not installed
#           here (it would have to be built from PyPI's 0.28.1 sources).
# Needs python3-torch, python3-numpy, openmpi-bin, python3-mpi4py and, for
# e2e with torchvision models, python3-torchvision (apt). A benchmark, not a
# test: nothing here is installed by scripts/install_deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-single}
PEERS=${2:-../shared/bench/peers}
REPS=${REPS:-2}
OUT=${OUT:-/tmp/gradsync-vs-peers-$MODE}
MIN_TIME=${MIN_TIME:-1}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/peers.XXXXXX)
cp -r "$PEERS"/. "$work"/
bazel build //:gradsyncd //:gradsyncctl //:gradsync_bench //:libgradsync
cleanup=("rm -rf $work")
trap 'for c in "${cleanup[@]}"; do eval "$c"; done' EXIT
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
MPI_TCP="--mca btl tcp,self --mca btl_tcp_if_include lo"
NOMMAP="-x MALLOC_MMAP_THRESHOLD_=4294967296 -x MALLOC_TRIM_THRESHOLD_=4294967296"
peer() {  # peer LOG COMMAND...: a peer's script from the peers' directory
  local log=$1
  shift
  (cd "$work" && "$@") > "$OUT/$log" 2>&1 || echo "$(date +%T) $log failed (see $OUT/$log)"
}

single_rep() {  # one daemon, 2 ranks
  local rep=$1 bench="bazel-bin/tools/bench/gradsync_bench --socket $dir/d.sock -np 2"
  $bench --min-time "$MIN_TIME" > "$OUT/gradsync-zerocopy_r$rep.log"
  $bench --min-time "$MIN_TIME" --copy > "$OUT/gradsync-copy_r$rep.log"
  $bench --resnet --steps 15 > "$OUT/gradsync-resnet-zerocopy_r$rep.log"
  $bench --resnet --steps 15 --copy > "$OUT/gradsync-resnet-copy_r$rep.log"
  peer "gloo_r$rep.log" /usr/bin/python3 allreduce_sweep.py --backend gloo -n 2 --min-time "$MIN_TIME" --label gloo
  peer "mpi-sm_r$rep.log" $MPIRUN -np 2 /usr/bin/python3 allreduce_sweep.py --backend mpi --min-time "$MIN_TIME" --label mpi-sm
  peer "mpi-sm-nommap_r$rep.log" $MPIRUN -np 2 $NOMMAP /usr/bin/python3 allreduce_sweep.py --backend mpi \
    --min-time "$MIN_TIME" --label mpi-sm-nommap
  peer "resnet-gloo_r$rep.log" /usr/bin/python3 resnet_allreduce.py --backend gloo -n 2 --steps 15 --label gloo
  peer "resnet-mpi-sm_r$rep.log" $MPIRUN -np 2 /usr/bin/python3 resnet_allreduce.py --backend mpi --steps 15 --label mpi-sm
}

cross_rep() {  # 2 daemons x per-node ranks, UCX over loopback TCP
  local rep=$1 layout n
  for layout in ${NODES:-2x1 2x2}; do
    n=$((2 * ${layout#2x}))
    scripts/bench_two_daemons.sh -np "$n" --min-time "$MIN_TIME" > "$OUT/gradsync-$layout-zerocopy_r$rep.log"
    scripts/bench_two_daemons.sh -np "$n" --resnet --steps 15 > "$OUT/gradsync-$layout-resnet-zerocopy_r$rep.log"
    scripts/bench_two_daemons.sh -np "$n" --resnet --steps 15 --copy > "$OUT/gradsync-$layout-resnet-copy_r$rep.log"
    peer "gloo-n${n}_r$rep.log" /usr/bin/python3 allreduce_sweep.py --backend gloo -n "$n" --min-time "$MIN_TIME" \
      --label "gloo-n$n"
    peer "mpi-tcp-n${n}_r$rep.log" $MPIRUN -np "$n" $MPI_TCP /usr/bin/python3 allreduce_sweep.py --backend mpi \
      --min-time "$MIN_TIME" --label "mpi-tcp-n$n"
    peer "resnet-gloo-n${n}_r$rep.log" /usr/bin/python3 resnet_allreduce.py --backend gloo -n "$n" --steps 15 \
      --label "gloo-n$n"
    peer "resnet-mpi-tcp-n${n}_r$rep.log" $MPIRUN -np "$n" $MPI_TCP /usr/bin/python3 resnet_allreduce.py \
      --backend mpi --steps 15 --label "mpi-tcp-n$n"
  done
}

e2e_rep() {  # the synthetic training benchmark, 2 ranks
  local rep=$1 b
  local -a train=(examples/pytorch/pytorch_synthetic_benchmark.py --model "${E2E_MODEL:-resnet18}"
                  ${E2E_ARGS:---batch-size 16 --image-size 64 --num-iters 6 --num-batches-per-iter 3})
  scripts/bench_two_daemons.sh --exec tools/bench/gradsyncrun_two_hosts.sh /usr/bin/python3 "${train[@]}" \
    > "$OUT/e2e-gradsync-2daemons_r$rep.log" 2>&1
  scripts/bench_two_daemons.sh --exec tools/bench/gradsyncrun_two_hosts.sh /usr/bin/python3 "${train[@]}" --copy \
    > "$OUT/e2e-gradsync-2daemons-copy_r$rep.log" 2>&1
  client/python/bin/gradsyncrun -np 2 --private-daemon /usr/bin/python3 "${train[@]}" \
    > "$OUT/e2e-gradsync-1daemon_r$rep.log" 2>&1
  GLOO_SOCKET_IFNAME=lo client/python/bin/gradsyncrun -np 2 --private-daemon /usr/bin/python3 "${train[@]}" \
    --backend ddp-gloo \
    > "$OUT/e2e-ddp-gloo_r$rep.log" 2>&1
  for b in "$OUT"/e2e-*_r$rep.log; do
    echo "CSV,e2e,$(basename "$b" "_r$rep.log"),$(sed -n 's/.*img\/sec per rank: \([0-9.]*\).*step time \([0-9.]*\) ms.*/\1,\2/p' "$b")"
  done >> "$OUT/summary-e2e_r$rep.log"
}

dir=$(mktemp -d /tmp/gradsync-bench.XXXXXX)
cleanup+=("rm -rf $dir")
case $MODE in
  single)
    bazel-bin/daemon/exe/gradsyncd --socket-path "$dir/d.sock" --log-level warn &
    daemon_pid=$!
    cleanup=("kill -TERM $daemon_pid; wait $daemon_pid" "${cleanup[@]}")
    for _ in $(seq 100); do [ -S "$dir/d.sock" ] && break; sleep 0.05; done
    ;;
  cross) export UCX_TLS=tcp ;;
  e2e) ;;
  *) echo "unknown mode $MODE (single, cross, e2e)" >&2; exit 2 ;;
esac
for rep in $(seq 1 "$REPS"); do
  echo "$(date +%T) $MODE rep $rep"
  "${MODE}_rep" "$rep"
done
echo "$(date +%T) done; CSV lines:"
grep -h "^CSV" "$OUT"/*.log | sort
