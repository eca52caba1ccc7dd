#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The torch.distributed backend against Gloo and gradsync.torch, in the
# same processes (tools/bench/c10d_bench.py under torchrun, 2 ranks, PyPI's
# torch from scripts/pypi_torch_env.sh). A benchmark, not a test.
#   scripts/bench_c10d.sh [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //client:libgradsync.so //daemon/exe:gradsyncd //:gradsyncctl
source "$(scripts/pypi_torch_env.sh)/env.sh"
export GRADSYNC_LIBRARY="$PWD/bazel-bin/client/libgradsync.so" GRADSYNC_DAEMON="$PWD/bazel-bin/daemon/exe/gradsyncd"
export GRADSYNC_CTL="$PWD/bazel-bin/tools/gradsyncctl/gradsyncctl" PYTHONPATH="$PWD/client/python"
exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 tools/bench/c10d_bench.py "$@"
