#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The C API example: builds gradsync, starts a private gradsyncd, trains a
# linear regression with N ranks (default 2) of client/examples through it,
# and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-2}
scripts/install_deps.sh
bazel build //:gradsyncd //:gradsyncctl //client/examples:linear_regression

dir=$(mktemp -d /tmp/gradsync-example.XXXXXX)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

bazel-bin/daemon/exe/gradsyncd --socket-path "$dir/gradsyncd.sock" --log-level warn &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$dir/gradsyncd.sock" ] && break; sleep 0.05; done

export GRADSYNC_SOCKET="$dir/gradsyncd.sock" GRADSYNC_JOB_ID="example-$$" GRADSYNC_SIZE="$NP"
GRADSYNC_TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export GRADSYNC_TOKEN
pids=()
for ((r = 0; r < NP; r++)); do
  GRADSYNC_RANK=$r GRADSYNC_LOCAL_RANK=$r bazel-bin/client/examples/linear_regression 2>&1 | sed "s/^/[rank $r] /" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
echo "--- gradsyncctl status ---"
bazel-bin/tools/gradsyncctl/gradsyncctl --socket "$dir/gradsyncd.sock" status | head -8
exit $status
