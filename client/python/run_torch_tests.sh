#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs client/python/tests (or only the file $2 of it; "all" or none: every
# file) under gradsyncrun with
# $1 ranks and a private daemon, on Debian's torch; with $3 = pypi, on the
# PyPI torch environment named by GRADSYNC_TORCH_ENV (scripts/pypi_torch_env.sh).
set -euo pipefail
root="$TEST_SRCDIR/${TEST_WORKSPACE:-gradsync}"
python=/usr/bin/python3
if [ "${3:-}" = pypi ]; then
  if [ ! -f "${GRADSYNC_TORCH_ENV:-/nonexistent}/env.sh" ]; then
    echo "GRADSYNC_TORCH_ENV must name the environment scripts/pypi_torch_env.sh made" \
         "(bazel test --test_env=GRADSYNC_TORCH_ENV=\$(scripts/pypi_torch_env.sh) ...)" >&2
    exit 1
  fi
  source "$GRADSYNC_TORCH_ENV/env.sh"
  python="$PYTHON"
fi
if ! "$python" -c "import torch, pytest" 2>/dev/null; then
  echo "$python cannot import torch and pytest: run scripts/install_deps.sh (or scripts/pypi_torch_env.sh)" >&2
  exit 1
fi
"$python" -c "import torch; print('gradsync.torch suite on torch', torch.__version__)"
export GRADSYNC_LIBRARY="$root/client/libgradsync.so" GRADSYNC_DAEMON="$root/daemon/exe/gradsyncd"
source "$root/client/python/sanitizer_env.sh"
export PYTHONDONTWRITEBYTECODE=1
# Ends itself a little before Bazel would (TEST_TIMEOUT).
exec timeout $(( ${TEST_TIMEOUT:-300} - 20 )) "$python" "$root/client/python/bin/gradsyncrun" --private-daemon \
  --daemon-arg=--stall-warning-seconds=10 --daemon-arg=--stall-deadline-seconds=30 -np "$1" \
  "$python" -m pytest -q -p no:cacheprovider "$root/client/python/tests$([ "${2:-all}" = all ] || echo "/$2")"
