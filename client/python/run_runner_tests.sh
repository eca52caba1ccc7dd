#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the gradsyncrun tests (client/python/runner_tests, or the directory $1
# of client/python) with the built binaries.
set -euo pipefail
root="$TEST_SRCDIR/${TEST_WORKSPACE:-gradsync}"
export GRADSYNC_LIBRARY="$root/client/libgradsync.so" GRADSYNC_DAEMON="$root/daemon/exe/gradsyncd"
source "$root/client/python/sanitizer_env.sh"
export GRADSYNC_CTL="$root/tools/gradsyncctl/gradsyncctl" GRADSYNCRUN="$root/client/python/bin/gradsyncrun"
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$root/client/python" GRADSYNC_EXAMPLES="$root/examples/pytorch"
# Ends itself a little before Bazel would (TEST_TIMEOUT), so pytest can
# still print which test was running.
exec timeout $(( ${TEST_TIMEOUT:-300} - 20 )) /usr/bin/python3 -m pytest -q -p no:cacheprovider "$root/client/python/${1:-runner_tests}"
