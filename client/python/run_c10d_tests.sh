#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs client/python/c10d_tests (the torch.distributed backend: torchrun,
# DDP, FSDP2, subgroups, faults) on the PyPI torch environment named by
# GRADSYNC_TORCH_ENV (scripts/pypi_torch_env.sh); each test starts its own
# ranks, and their node's first rank starts a private gradsyncd.
set -euo pipefail
root="$TEST_SRCDIR/${TEST_WORKSPACE:-gradsync}"
if [ ! -f "${GRADSYNC_TORCH_ENV:-/nonexistent}/env.sh" ]; then
  echo "GRADSYNC_TORCH_ENV must name the environment scripts/pypi_torch_env.sh made" \
       "(bazel test --test_env=GRADSYNC_TORCH_ENV=\$(scripts/pypi_torch_env.sh) ...)" >&2
  exit 1
fi
source "$GRADSYNC_TORCH_ENV/env.sh"
"$PYTHON" -c "import torch; print('c10d backend suite on torch', torch.__version__)"
export GRADSYNC_LIBRARY="$root/client/libgradsync.so" GRADSYNC_DAEMON="$root/daemon/exe/gradsyncd"
export GRADSYNC_CTL="$root/tools/gradsyncctl/gradsyncctl" PYTHONPATH="$root/client/python" PYTHONDONTWRITEBYTECODE=1
export GRADSYNC_DAEMON_ARGS="--stall-warning-seconds=5 --stall-deadline-seconds=20"
source "$root/client/python/sanitizer_env.sh"
cd "${TEST_TMPDIR:-/tmp}"
# Ends itself a little before Bazel would (TEST_TIMEOUT).
exec timeout $(( ${TEST_TIMEOUT:-900} - 20 )) "$PYTHON" -m pytest -q -p no:cacheprovider "$root/client/python/c10d_tests" "$@"
