#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: unit tests, multi-process integration and fault
# tests against a real gradsyncd, config and deploy checks; then the
# multi-process tests once more under ASan+UBSan (--config=asan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel test //... "$@"
# The multi-process, fault, fuzz-regression and Python tests again with
# AddressSanitizer, LeakSanitizer and UBSan in the daemon, client and workers.
bazel test --config=asan //tests/... //client/python/... "$@"
