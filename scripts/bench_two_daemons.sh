#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gradsync_bench across two daemons on this machine (one rank each, UCX over
# loopback TCP), the setup of the cross-node figures in docs/performance.md.
# Arguments go to gradsync_bench, e.g.
#   scripts/bench_two_daemons.sh --min-bytes 4 --max-bytes 4
#   scripts/bench_two_daemons.sh --resnet
# GRADSYNC_BENCH_DAEMON=path runs another gradsyncd build (a before/after
# comparison); GRADSYNC_BENCH_DAEMON_FLAGS adds flags to both daemons, e.g.
# "--steady-state leader".
#   scripts/bench_two_daemons.sh --exec COMMAND...
# runs COMMAND instead, with GRADSYNC_BENCH_SOCKETS (the two daemons'
# sockets, comma-separated) and GRADSYNC_BENCH_LEADER (daemon a's peer
# address) in its environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //:gradsyncd //:gradsync_bench >/dev/null 2>&1
dir=$(mktemp -d /tmp/gradsync-bench2.XXXXXX)
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; rm -rf "$dir"' EXIT
export UCX_TLS=${UCX_TLS:-tcp}
for d in a b; do
  "${GRADSYNC_BENCH_DAEMON:-bazel-bin/daemon/exe/gradsyncd}" --socket-path "$dir/$d.sock" --peer-address 127.0.0.1:0 --log-level info ${GRADSYNC_BENCH_DAEMON_FLAGS:-} \
    >"$dir/$d.log" 2>&1 &
  pids+=($!)
done
leader=""
for _ in $(seq 100); do
  leader=$(sed -n 's/.*peer service on \([0-9.:]*\).*/\1/p' "$dir/a.log")
  [ -n "$leader" ] && [ -S "$dir/b.sock" ] && break
  sleep 0.05
done
[ -n "$leader" ] || { echo "daemon a did not start:" >&2; cat "$dir/a.log" >&2; exit 1; }
if [ "${1:-}" = --exec ]; then
  shift
  GRADSYNC_BENCH_SOCKETS="$dir/a.sock,$dir/b.sock" GRADSYNC_BENCH_LEADER=$leader "$@"
else
  bazel-bin/tools/bench/gradsync_bench --socket "$dir/a.sock,$dir/b.sock" --leader "$leader" -np 2 "$@"
fi
