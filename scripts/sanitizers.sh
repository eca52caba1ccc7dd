#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite under sanitizers: `asan` (AddressSanitizer,
# LeakSanitizer, UBSan), `tsan` (ThreadSanitizer, with the suppressions of
# tools/sanitizers/tsan.supp for uninstrumented system libraries), or both
# (default). Extra arguments go to bazel test. Under TSan the gradsync.torch
# suites run with TSan preloaded into Python (client/python/sanitizer_env.sh)
# and an instrumented daemon; the gradsyncrun tests are left out of that
# pass because they start shells, and bash crashes with TSan preloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
shift || true
scripts/install_deps.sh
if [ "$which" = asan ] || [ "$which" = all ]; then
  bazel test --config=asan --test_env=GRADSYNC_TEST_TIME_SCALE=3 //... "$@"
fi
if [ "$which" = tsan ] || [ "$which" = all ]; then
  bazel test --config=tsan --test_env=GRADSYNC_TEST_TIME_SCALE=5 \
    --test_env=TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/sanitizers/tsan.supp" \
    "$@" -- //... -//client/python:gradsyncrun_test
fi
