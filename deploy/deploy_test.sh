#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the deploy files: the systemd unit passes `systemd-analyze verify`
# with the built daemon, and the daemon accepts the example config (and
# rejects a broken copy of it with a message naming the line).
set -euo pipefail
root="$TEST_SRCDIR/${TEST_WORKSPACE:-gradsync}"
daemon="$root/daemon/exe/gradsyncd"

"$root/deploy/check_unit.sh" "$daemon" "$root/deploy/systemd/gradsyncd.service"

out=$("$daemon" --check-config --config-path "$root/deploy/systemd/gradsyncd.textproto")
grep -q "configuration OK" <<< "$out"
grep -q 'socket_path: "/run/gradsync/gradsyncd.sock"' <<< "$out"

broken="$TEST_TMPDIR/broken.textproto"
{ cat "$root/deploy/systemd/gradsyncd.textproto"; echo "no_such_option: 1"; } > "$broken"
if msg=$("$daemon" --check-config --config-path "$broken" 2>&1); then
  echo "a broken config was accepted" >&2
  exit 1
fi
grep -q "no_such_option" <<< "$msg"
# Every metric the Grafana dashboard queries is one the daemon exports.
dashboard="$root/deploy/grafana/gradsync-dashboard.json"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$dashboard"
for name in $(grep -o 'gradsync_[a-z_]*' "$dashboard" | sed -E 's/_(bucket|sum|count)$//' | sort -u); do
  grep -q "\"$name\"" "$root/daemon/metrics/prometheus.cc" || { echo "dashboard queries $name, which gradsyncd does not export" >&2; exit 1; }
done
echo "deploy files OK"
