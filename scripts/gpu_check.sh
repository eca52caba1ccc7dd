#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU suite, run on the GPU test machine from the repository root with
# .gpu_bundle/ carried along (made here by scripts/gpu_bundle.sh):
#
#   scripts/gpu_check.sh tests    facts, gradsyncctl status, the CUDA pytest suite with 2 and 4 ranks on one
#                                 GPU, the kill check, the torch.distributed backend on CUDA, two daemons
#                                 (staging, NCCL, an elastic job over NCCL losing a rank)          (~4 min)
#   scripts/gpu_check.sh bench    the reduction kernel alone against a device copy (local_reduce_bench),
#                                 gradsync_bench --device cuda (sweep, ResNet-50 gradient set) with 1, 2, 4 ranks,
#                                 then the PyTorch bench with the references (D2D copy, NCCL 1 rank)  (~4 min)
#   scripts/gpu_check.sh resnet   ResNet-50 training steps: 1 process batch 128 against 2 ranks batch 64,
#                                 MPS off and (when it starts) on                                  (~5 min)
#   scripts/gpu_check.sh facts    what the multi-GPU design rests on (tools/bench/gpu_facts.py): the device
#                                 inventory, how each PyTorch allocator's memory exports (legacy IPC, cuMem
#                                 handle by file descriptor), N NCCL ranks on the GPU in one process against
#                                 torch.distributed's N processes                                  (~2 min)
#   scripts/gpu_check.sh virtual  the paths over several GPUs of a node on the one GPU there: gradsyncd with
#                                 --virtual-gpus-per-gpu 2 and 4 (NCCL 2.30 from the bundle), the CUDA suite
#                                 (allreduce and broadcast) with 4 ranks, gradsync_bench against
#                                 torch.distributed's NCCL with as many processes, two daemons x 2 virtual
#                                 GPUs                                                             (~5 min)
#   scripts/gpu_check.sh ab       an A/B of two daemons, interleaved (A B B A A B B A): .gpu_bundle/bin/gradsyncd
#                                 against .gpu_bundle/bin/gradsyncd.before (copy a build of the older
#                                 commit there), gradsync_bench --resnet and 1 MiB..64 MiB, 1/2/4 ranks (~2 min)
#
# GPU_CHECK_MPS=0 leaves out the bench stage's runs under MPS; GPU_CHECK_ONLY=REGEX
# runs only the steps whose names match it; GPU_FACTS_RANKS (default "2 4") the
# rank counts of the facts stage's NCCL runs.
# Output goes to stdout and to $OUT/gpu_check-<stage>.log when $OUT is set.
# Exit code: the number of failed steps (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-tests}
bundle=$(pwd)/.gpu_bundle
log=${OUT:-/tmp}/gpu_check-$stage.log
exec > >(tee "$log") 2>&1
failures=0
step() {  # step NAME COMMAND...: runs it, reports, counts failures
  local name=$1
  shift
  # GPU_CHECK_ONLY=REGEX runs only the steps whose names match (and those
  # that start and stop gradsyncd).
  if [[ -n ${GPU_CHECK_ONLY:-} && ! $name =~ $GPU_CHECK_ONLY && ! $name =~ gradsyncd ]]; then
    return 0
  fi
  echo "=== $name: $*"
  local start=$SECONDS
  "$@"
  local rc=$?
  echo "=== $name: $([[ $rc == 0 ]] && echo PASSED || echo "FAILED (exit $rc)") in $((SECONDS - start)) s"
  [[ $rc == 0 ]] || failures=$((failures + 1))
  return 0
}

[[ -f $bundle/COMMIT ]] || { echo "no $bundle: run scripts/gpu_bundle.sh here and carry .gpu_bundle"; exit 100; }
echo "bundle built from $(cat "$bundle/COMMIT"); tree at $(git rev-parse HEAD 2>/dev/null || echo '?')"
workdir=$(mktemp -d /tmp/gpu_check.XXXXXX)
# The bundle travels compressed: unpack a copy of it.
cp -r "$bundle" "$workdir/bundle"
bundle=$workdir/bundle
find "$bundle" -name '*.xz' -print0 | xargs -0 -r -n 1 -P 8 xz -d
chmod +x "$bundle"/bin/*
python=${PYTHON:-python3}
nccl=$($python - <<'PY'
import os
try:
    import nvidia.nccl as n
    for d in list(getattr(n, "__path__", [])):
        p = os.path.join(d, "lib", "libnccl.so.2")
        if os.path.exists(p):
            print(p)
            break
except ImportError:
    pass
PY
)
# An NCCL the bundle brings (scripts/nccl_build.sh) goes before PyTorch's.
[[ -f $bundle/nccl/libnccl.so.2 ]] && nccl=$bundle/nccl/libnccl.so.2
export GRADSYNC_NCCL_LIBRARY=$nccl
export GRADSYNC_LIBRARY=$bundle/lib/libgradsync.so
export PYTHONPATH=$(pwd)/client/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GRADSYNC_REQUIRE_CUDA=1

echo "--- machine"
nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_mode,driver_version --format=csv 2>&1 | head -5
$python -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', torch.cuda.device_count()); print('nccl (torch):', torch.cuda.nccl.version() if torch.cuda.is_available() else 'n/a')"
echo "NCCL library for gradsyncd: ${nccl:-none found}"
uname -a

# Our binaries find their libraries in the bundle through these wrappers;
# libgradsync.so finds them by its RPATH ($ORIGIN), so the ranks (Python with
# PyTorch) run without LD_LIBRARY_PATH and keep their own libraries.
mkdir -p "$workdir/bin"
for tool in gradsyncd gradsyncctl gradsync_bench local_reduce_bench local_reduce_bench.before; do
  [[ -f $bundle/bin/$tool ]] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s/bin/%s "$@"\n' \
    "$bundle" "$bundle" "$tool" > "$workdir/bin/$tool"
  chmod +x "$workdir/bin/$tool"
done
tools=$workdir/bin
socket=$workdir/gs.sock
daemon_pid=
daemon_flags=()  # more flags for the next start_daemon
start_daemon() {
  "$tools/gradsyncd" --socket-path "$socket" --log-level info --stall-warning-seconds 10 \
    --stall-deadline-seconds 60 "${daemon_flags[@]}" > "$workdir/gradsyncd.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do
    [[ -S $socket ]] && "$tools/gradsyncctl" --socket "$socket" status > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "gradsyncd did not start:"; cat "$workdir/gradsyncd.log"; return 1
}
stop_daemon() {
  [[ -n $daemon_pid ]] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null
  local rc=0
  for _ in $(seq 400); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    echo "gradsyncd did not exit within 40 s of SIGTERM: killed"
    kill -KILL "$daemon_pid"
  fi
  wait "$daemon_pid" || rc=$?
  daemon_pid=
  echo "--- gradsyncd log (exit $rc)"
  tail -n 60 "$workdir/gradsyncd.log"
  return $rc
}
trap 'stop_daemon > /dev/null 2>&1; rm -rf "$workdir"' EXIT
# under_mps COMMAND...: stops gradsyncd, starts MPS and gradsyncd under it,
# runs COMMAND, stops both. Returns 1 (gradsyncd untouched) without MPS tools.
under_mps() {
  if ! command -v nvidia-cuda-mps-control > /dev/null; then
    echo "no nvidia-cuda-mps-control: MPS on not measured"
    return 1
  fi
  stop_daemon > /dev/null
  export CUDA_MPS_PIPE_DIRECTORY=$workdir/mps CUDA_MPS_LOG_DIRECTORY=$workdir/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    step "start gradsyncd under MPS" start_daemon
    "$@"
    stop_daemon > /dev/null
    echo quit | nvidia-cuda-mps-control
  else
    echo "MPS control daemon did not start: MPS on not measured"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  return 0
}
run_ranks() {  # run_ranks N COMMAND...
  local n=$1
  shift
  timeout 280 "$(pwd)/client/python/bin/gradsyncrun" --socket "$socket" -np "$n" "$@"
}
has_gpu_and_nccl() {
  "$tools/gradsyncctl" --socket "$socket" status --json > "$workdir/status.json" || return 1
  $python - "$workdir/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
gpus = s.get("gpus", [])
print("gradsyncd sees %d GPU(s): %s; NCCL %s (%s)" % (len(gpus), [g.get("name") for g in gpus],
      s.get("nccl_version", 0), s.get("nccl_library") or s.get("nccl_note")))
sys.exit(0 if gpus and s.get("nccl_version", 0) > 0 else 1)
PY
}

step "start gradsyncd" start_daemon
step "gradsyncctl status" "$tools/gradsyncctl" --socket "$socket" status
step "gradsyncd sees the GPU and loaded NCCL" has_gpu_and_nccl

case $stage in
  tests)
    for n in 2 4; do
      step "CUDA suite, $n ranks on one GPU" run_ranks "$n" $python -m pytest -q -x -p no:cacheprovider \
        client/python/tests_gpu
    done
    step "CUDA suite, 2 ranks, PyTorch's expandable segments (cuMem memory)" env \
      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run_ranks 2 $python -m pytest -q -x -p no:cacheprovider \
      client/python/tests_gpu
    step "CUDA suite, 2 ranks, PyTorch's cudaMallocAsync backend (staging buffers)" env \
      PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync run_ranks 2 $python -m pytest -q -x -p no:cacheprovider \
      client/python/tests_gpu
    step "rank killed mid-collective" timeout 200 $python client/python/tests_gpu/kill_check.py "$socket"
    step "torch.distributed backend on CUDA, 2 ranks on one GPU" env GRADSYNC_SOCKET="$socket" \
      GRADSYNC_CTL="$tools/gradsyncctl" timeout 200 $python -m torch.distributed.run --standalone \
      --nproc-per-node 2 client/python/tests_gpu/c10d_cuda_check.py
    step "two daemons on one GPU, host staging + UCX ring" timeout 280 $python \
      client/python/tests_gpu/two_daemons_check.py "$tools/gradsyncd" "$tools/gradsyncctl" "$workdir" staging
    # Two NCCL ranks on one GPU need NCCL >= 2.30 and its opt-in flag; with
    # the bundle's own NCCL (2.30) the communicator must form.
    if [[ -f $bundle/nccl/libnccl.so.2 ]]; then mode=nccl where=; else mode=auto where=" where it can form"; fi
    step "two daemons on one GPU, NCCL between them$where" \
      env NCCL_MULTI_RANK_GPU_ENABLE=1 TWO_DAEMONS_TIMEOUT=150 timeout 200 $python client/python/tests_gpu/two_daemons_check.py \
      "$tools/gradsyncd" "$tools/gradsyncctl" "$workdir" "$mode"
    # An elastic job over NCCL among the daemons: a rank killed, a new
    # communicator in the next epoch (needs the bundle's NCCL 2.30).
    if [[ -f $bundle/nccl/libnccl.so.2 ]]; then
      step "elastic job across two daemons on one GPU, NCCL between them, a rank killed" \
        env NCCL_MULTI_RANK_GPU_ENABLE=1 timeout 200 $python client/python/tests_gpu/elastic_nccl_check.py \
        "$tools/gradsyncd" "$tools/gradsyncctl" "$workdir" cuda
    else
      echo "=== elastic job across two daemons over NCCL: skipped (no NCCL 2.30 in the bundle)"
    fi
    step "gradsyncctl jobs" "$tools/gradsyncctl" --socket "$socket" jobs
    ;;
  bench)
    # The reduction kernel alone against a device copy; against the build in
    # bin/local_reduce_bench.before (an older commit's) when the bundle has one,
    # interleaved A B A B.
    for inputs in 2 4; do
      for round in 1 2; do
        step "local reduction kernel, $inputs inputs (this build)" timeout 60 "$tools/local_reduce_bench" --inputs $inputs
        [[ -x $tools/local_reduce_bench.before ]] && step "local reduction kernel, $inputs inputs (the build before)" \
          timeout 60 "$tools/local_reduce_bench.before" --inputs $inputs
      done
    done
    for n in 1 2 4; do
      step "gradsync_bench --device cuda, $n ranks" timeout 200 "$tools/gradsync_bench" --socket "$socket" \
        -np "$n" --device cuda --min-time 0.5
      step "gradsync_bench --device cuda --resnet, $n ranks" timeout 100 "$tools/gradsync_bench" \
        --socket "$socket" -np "$n" --device cuda --resnet
    done
    step "gradsync_bench --device cuda, 2 ranks, completion on the caller's stream" env GRADSYNC_CUDA_COMPLETION=stream \
      timeout 100 "$tools/gradsync_bench" --socket "$socket" -np 2 --device cuda --min-time 0.3 --max-bytes 1M
    step "gradsync_bench --device cpu, 2 ranks (this machine's CPU path, for the latency floor)" timeout 100 \
      "$tools/gradsync_bench" --socket "$socket" -np 2 --device cpu --min-time 0.3 --max-bytes 1M
    step "PyTorch CUDA allreduce bench with references (D2D copy, NCCL 1 rank), 2 ranks" \
      run_ranks 2 $python examples/pytorch/cuda_allreduce_bench.py --iters 30
    # Two daemons on one GPU as the stand-in for two nodes, one rank each.
    two_daemon_bench() {  # two_daemon_bench staging|auto
      local dir=$workdir/bench-$1 pids=() leader
      mkdir -p "$dir"
      # The daemons run NCCL: two ranks of it on one GPU need the flag there.
      for node in 0 1; do
        NCCL_MULTI_RANK_GPU_ENABLE=1 "$tools/gradsyncd" --socket-path "$dir/n$node.sock" --peer-address 127.0.0.1:0 \
          --gpu-cross-node "$1" > "$dir/n$node.log" 2>&1 &
        pids+=($!)
      done
      for _ in $(seq 100); do
        leader=$("$tools/gradsyncctl" --socket "$dir/n0.sock" status --json 2>/dev/null |
          $python -c 'import json,sys; print(json.load(sys.stdin)["peer_address"])' 2>/dev/null) && [[ -n $leader ]] &&
          "$tools/gradsyncctl" --socket "$dir/n1.sock" status > /dev/null 2>&1 && break
        sleep 0.1
      done
      local rc=0
      UCX_TLS=tcp,self timeout 150 "$tools/gradsync_bench" \
        --socket "$dir/n0.sock,$dir/n1.sock" --leader "$leader" -np 2 --device cuda --min-time 0.5 || rc=$?
      UCX_TLS=tcp,self timeout 100 "$tools/gradsync_bench" \
        --socket "$dir/n0.sock,$dir/n1.sock" --leader "$leader" -np 2 --device cuda --resnet || rc=$?
      kill -TERM "${pids[@]}" 2>/dev/null
      wait "${pids[@]}"
      grep -h "NCCL communicator\|no NCCL among\|ended:" "$dir"/n*.log
      return $rc
    }
    # The peer of two daemons over NCCL: torch.distributed's NCCL with 2 ranks
    # on the GPU, on the same NCCL library (2.30 from the bundle) when there is one.
    torch_nccl() {
      env NCCL_MULTI_RANK_GPU_ENABLE=1 ${nccl:+LD_PRELOAD=$nccl} timeout 120 $python tools/bench/torch_nccl_allreduce.py -n 2
    }
    # Without MPS the GPU switches between the daemon's and the ranks'
    # contexts for every operation; with it their work shares the GPU.
    mps_bench() {
      for n in 1 2 4; do
        step "gradsync_bench --device cuda under MPS, $n ranks" timeout 100 "$tools/gradsync_bench" \
          --socket "$socket" -np "$n" --device cuda --min-time 0.3
        step "gradsync_bench --device cuda --resnet under MPS, $n ranks" timeout 100 "$tools/gradsync_bench" \
          --socket "$socket" -np "$n" --device cuda --resnet
      done
      step "PyTorch CUDA allreduce bench under MPS, 2 ranks" run_ranks 2 $python \
        examples/pytorch/cuda_allreduce_bench.py --iters 30
      step "gradsync_bench --device cuda under MPS, 2 daemons x 1 rank, NCCL where it forms" two_daemon_bench auto
      step "torch.distributed NCCL allreduce under MPS, 2 ranks on one GPU" torch_nccl
    }
    if [[ ${GPU_CHECK_MPS:-1} == 0 ]]; then
      echo "MPS skipped (GPU_CHECK_MPS=0)"
    else
      under_mps mps_bench && step "start gradsyncd again (MPS off)" start_daemon
    fi
    step "gradsync_bench --device cuda, 2 daemons x 1 rank, host staging" two_daemon_bench staging
    step "gradsync_bench --device cuda, 2 daemons x 1 rank, NCCL where it forms" two_daemon_bench auto
    step "torch.distributed NCCL allreduce, 2 ranks on one GPU" torch_nccl
    ;;
  facts)
    step "device inventory" timeout 60 $python tools/bench/gpu_facts.py inventory
    for alloc in native expandable async; do
      step "export of a tensor, $alloc allocator" timeout 120 $python tools/bench/gpu_facts.py vmm $alloc
    done
    if [[ -n $nccl ]]; then
      for n in ${GPU_FACTS_RANKS:-2 4}; do
        step "NCCL, $n ranks on the GPU in one process" env NCCL_MULTI_RANK_GPU_ENABLE=1 LD_PRELOAD=$nccl \
          timeout 60 $python tools/bench/gpu_facts.py nccl $n "$nccl"
        step "torch.distributed NCCL, $n processes on the GPU" env NCCL_MULTI_RANK_GPU_ENABLE=1 LD_PRELOAD=$nccl \
          timeout 120 $python tools/bench/torch_nccl_allreduce.py -n $n --sizes 1048576 16777216 67108864 268435456
      done
    fi
    ;;
  resnet)
    resnet() {  # resnet LABEL
      echo "--- $1"
      timeout 200 $python examples/pytorch/pytorch_synthetic_benchmark.py --cuda --backend single --model resnet50 \
        --batch-size 128 --image-size 224 --num-iters 5 --num-batches-per-iter 3 --threads 4 || return 1
      run_ranks 2 $python examples/pytorch/pytorch_synthetic_benchmark.py --cuda --model resnet50 --batch-size 64 \
        --image-size 224 --num-iters 5 --num-batches-per-iter 3 --threads 4
    }
    step "ResNet-50, MPS off" resnet "MPS off"
    under_mps step "ResNet-50, MPS on" resnet "MPS on"
    ;;
  ab)
    [[ -x $bundle/bin/gradsyncd.before ]] || { echo "no $bundle/bin/gradsyncd.before"; exit 100; }
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/gradsyncd.before "$@"\n' "$bundle" "$bundle" \
      > "$workdir/bin/gradsyncd.before"
    chmod +x "$workdir/bin/gradsyncd.before"
    stop_daemon > /dev/null
    ab_round() {  # ab_round LABEL DAEMON
      "$2" --socket-path "$socket" --log-level warn > "$workdir/gradsyncd.log" 2>&1 &
      daemon_pid=$!
      for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.1; done
      for n in 1 2 4; do
        "$tools/gradsync_bench" --socket "$socket" -np "$n" --device cuda --resnet | sed -n "s/^CSV,/AB,$1,/p"
        "$tools/gradsync_bench" --socket "$socket" -np "$n" --device cuda --min-bytes 1M --max-bytes 64M \
          --min-time 0.3 | sed -n "s/^CSV,/AB,$1,/p"
      done
      stop_daemon > /dev/null
    }
    for rep in 1 2; do  # A B B A: neither goes first more often
      ab_round after "$tools/gradsyncd"
      ab_round before "$workdir/bin/gradsyncd.before"
      ab_round before "$workdir/bin/gradsyncd.before"
      ab_round after "$tools/gradsyncd"
    done
    step "start gradsyncd again" start_daemon
    ;;
  virtual)
    # Several NCCL ranks on one GPU in one process: NCCL >= 2.30 with its
    # opt-in flag, and past 2 ranks a cap on channels (it hangs without:
    # docs/gpus.md). The peer runs with the same library and settings.
    export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_NCHANNELS=2 NCCL_LAUNCH_MODE=GROUP
    # What several GPUs of a node run (the others are refused, naming what is missing).
    suite_k="not allgather and not alltoall and not reducescatter and not autograd and not wrong_output"
    virtual_nccl_formed() { grep "NCCL communicator over this node's GPUs\|no NCCL over" "$workdir/gradsyncd.log"; \
      grep -q "NCCL communicator over this node's GPUs .* formed" "$workdir/gradsyncd.log"; }
    for per_gpu in 2 4; do
      stop_daemon > /dev/null
      daemon_flags=(--virtual-gpus-per-gpu "$per_gpu")
      step "start gradsyncd, $per_gpu virtual GPUs" start_daemon
      step "gradsyncctl status, $per_gpu virtual GPUs" "$tools/gradsyncctl" --socket "$socket" status
      step "CUDA suite, 4 ranks on $per_gpu virtual GPUs" run_ranks 4 $python -m pytest -q -x -p no:cacheprovider \
        -k "$suite_k" client/python/tests_gpu
      step "NCCL over the $per_gpu virtual GPUs formed" virtual_nccl_formed
      step "gradsync_bench --device cuda, 4 ranks on $per_gpu virtual GPUs" timeout 150 "$tools/gradsync_bench" \
        --socket "$socket" -np 4 --device cuda --min-time 0.3 --min-bytes 1M
    done
    stop_daemon > /dev/null
    daemon_flags=()
    step "start gradsyncd again (one GPU as it is)" start_daemon
    step "gradsync_bench --device cuda, 4 ranks on one GPU (no virtual GPUs)" timeout 150 "$tools/gradsync_bench" \
      --socket "$socket" -np 4 --device cuda --min-time 0.3 --min-bytes 1M
    step "torch.distributed NCCL, 4 processes on the GPU (same NCCL and settings)" ${nccl:+env LD_PRELOAD=$nccl} \
      timeout 150 $python tools/bench/torch_nccl_allreduce.py -n 4 --sizes 1048576 16777216 67108864 268435456
    step "two daemons x 2 virtual GPUs, NCCL inside and between them" env TWO_DAEMONS_TIMEOUT=200 \
      TWO_DAEMONS_FLAGS="--virtual-gpus-per-gpu 2" \
      TWO_DAEMONS_K="not broadcast and not optimizer and not cpu_and_cuda and not more_operations and $suite_k" \
      timeout 260 $python client/python/tests_gpu/two_daemons_check.py "$tools/gradsyncd" "$tools/gradsyncctl" \
      "$workdir" nccl
    ;;
  *) echo "unknown stage $stage (tests, bench, facts, resnet, ab, virtual)"; exit 100 ;;
esac
step "gradsyncd exits cleanly" stop_daemon
echo "gpu_check $stage: $failures step(s) failed"
exit "$failures"
