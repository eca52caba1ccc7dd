#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: unit tests, multi-process integration and fault
# tests against a real gradsyncd, config and deploy checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel test //... "$@"
