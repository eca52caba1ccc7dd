#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: the format check, the thread-safety build, unit
# tests, multi-process integration and fault
# tests against a real gradsyncd, config and deploy checks, and the
# gradsync.torch suite on Debian's torch and on PyPI's current one, the
# .deb and the wheel. The sanitizer passes (a whole build each, longer than
# all of this) are scripts/sanitizers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/check_format.sh
# The daemon, the client and what they share built with Clang's
# thread-safety analysis (GS_GUARDED_BY, GS_REQUIRES): a lock the code does
# not hold where it says it must fails the build. Only compiled: the analysis
# is the compiler's, and nothing of this build runs.
bazel build --config=threadsafety --output_groups=compilation_outputs \
  //daemon/... //client/... //base/... //handoff/...
bazel test //... "$@"
# The gradsync.torch suite on PyPI's current torch, from an environment
# made once outside the checkout.
torch_env="$(scripts/pypi_torch_env.sh)"
bazel test //client/python:torch_pypi_np2_test //client/python:torch_pypi_np3_test \
  //client/python:torch_pypi_adasum_np4_test //client/python:c10d_pypi_test --test_env=GRADSYNC_TORCH_ENV="$torch_env" "$@"
# The .deb and the wheel, built and used outside the build tree: lintian
# (where installed), the .deb unpacked, the wheel in a fresh venv training
# 2 ranks (half a minute). The clean Debian root check is not here: it
# downloads a Debian root (packaging/clean_root_check.sh).
packaging/check_packages.sh
# The Kubernetes manifests: the API's schemas and a policy scanner (tools
# from PyPI, made once outside the checkout).
deploy/check_k8s.sh
