#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gradsyncrun across the two daemons of scripts/bench_two_daemons.sh --exec,
# as if they were hosts nodeA and nodeB: a fake ssh runs each host's ranks
# here against its daemon. PER_HOST ranks on each (default 1).
#   scripts/bench_two_daemons.sh --exec tools/bench/gradsyncrun_two_hosts.sh python3 train.py
set -euo pipefail
: "${GRADSYNC_BENCH_SOCKETS:?run me under scripts/bench_two_daemons.sh --exec}"
per_host=${PER_HOST:-1}
dir=$(mktemp -d /tmp/gradsyncrun-two-hosts.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/ssh" <<'SSH'
#!/usr/bin/env bash
# fake ssh HOST COMMAND: runs COMMAND here against HOST's daemon
host=$1; shift
case $host in nodeA) n=1 ;; nodeB) n=2 ;; *) echo "fake ssh: unknown host $host" >&2; exit 255 ;; esac
GRADSYNC_SOCKET=$(cut -d, -f$n <<<"$GRADSYNC_BENCH_SOCKETS") exec bash -c "$*"
SSH
chmod +x "$dir/ssh"
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}  # what an installed gradsync gives a real host
client/python/bin/gradsyncrun -np $((2 * per_host)) -H "nodeA:$per_host,nodeB:$per_host" --ssh "$dir/ssh" \
  --leader "$GRADSYNC_BENCH_LEADER" "$@"
