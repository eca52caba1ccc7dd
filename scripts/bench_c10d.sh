#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The torch.distributed backend against Gloo and gradsync.torch, in the
# same processes (tools/bench/c10d_bench.py under torchrun, 2 ranks, PyPI's
# torch from scripts/pypi_torch_env.sh). A benchmark, not a test.
#   scripts/bench_c10d.sh [--nnodes 2] [--steps N] [--e2e]
# --nnodes 2: two torchrun agents on loopback, one rank each, as two nodes
# with a daemon each (gradsync between the daemons over TCP).
set -euo pipefail
cd "$(dirname "$0")/.."
nnodes=1
if [[ "${1:-}" == "--nnodes" ]]; then
  nnodes="$2"
  shift 2
fi
bazel build //client:libgradsync.so //daemon/exe:gradsyncd //:gradsyncctl
source "$(scripts/pypi_torch_env.sh)/env.sh"
export GRADSYNC_LIBRARY="$PWD/bazel-bin/client/libgradsync.so" GRADSYNC_DAEMON="$PWD/bazel-bin/daemon/exe/gradsyncd"
export GRADSYNC_CTL="$PWD/bazel-bin/tools/gradsyncctl/gradsyncctl" PYTHONPATH="$PWD/client/python"
if [[ "$nnodes" == 1 ]]; then
  exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 tools/bench/c10d_bench.py "$@"
fi
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
agents=()
for ((node = 0; node < nnodes; node++)); do
  GRADSYNC_PEER_HOST=127.0.0.1 "$PYTHON" -m torch.distributed.run --nnodes "$nnodes" --node-rank "$node" \
    --nproc-per-node 1 --master-addr 127.0.0.1 --master-port "$port" tools/bench/c10d_bench.py "$@" &
  agents+=($!)
done
status=0
for agent in "${agents[@]}"; do wait "$agent" || status=$?; done
exit "$status"
