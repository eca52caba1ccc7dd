#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs client/python/tests (or only the file $2 of it) under gradsyncrun with
# $1 ranks and a private daemon.
set -euo pipefail
root="$TEST_SRCDIR/${TEST_WORKSPACE:-gradsync}"
python=/usr/bin/python3
if ! "$python" -c "import torch, pytest" 2>/dev/null; then
  echo "python3-torch and python3-pytest are needed: run scripts/install_deps.sh" >&2
  exit 1
fi
export GRADSYNC_LIBRARY="$root/client/libgradsync.so" GRADSYNC_DAEMON="$root/daemon/exe/gradsyncd"
source "$root/client/python/sanitizer_env.sh"
export PYTHONDONTWRITEBYTECODE=1
exec timeout 240 "$python" "$root/client/python/bin/gradsyncrun" --private-daemon \
  --daemon-arg=--stall-warning-seconds=10 --daemon-arg=--stall-deadline-seconds=30 -np "$1" \
  "$python" -m pytest -q -p no:cacheprovider "$root/client/python/tests${2:+/$2}"
