#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs gradsync_bench against a private gradsyncd: allreduce sweeps on the
# zero-copy and copy paths, then the ResNet-50 step, with NP ranks (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-2}
scripts/install_deps.sh
bazel build //:gradsyncd //:gradsync_bench
dir=$(mktemp -d /tmp/gradsync-bench.XXXXXX)
bazel-bin/daemon/exe/gradsyncd --socket-path "$dir/d.sock" --log-level warn &
daemon_pid=$!
trap 'kill -TERM $daemon_pid; wait $daemon_pid; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/d.sock" ] && break; sleep 0.05; done
bench=bazel-bin/tools/bench/gradsync_bench
$bench --socket "$dir/d.sock" -np "$NP" "$@"
$bench --socket "$dir/d.sock" -np "$NP" --copy "$@"
$bench --socket "$dir/d.sock" -np "$NP" --resnet
$bench --socket "$dir/d.sock" -np "$NP" --resnet --copy
