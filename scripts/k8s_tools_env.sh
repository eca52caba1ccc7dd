#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes, once, a Python environment with the Kubernetes manifest checkers
# from PyPI (kubernetes-validate: the API's schemas; checkov: a policy
# scanner), outside the checkout so that a rerun reuses it; prints its
# directory (bin/ holds both tools).
#   GRADSYNC_K8S_TOOLS   where the environment lives
set -euo pipefail
dir="${GRADSYNC_K8S_TOOLS:-/var/cache/gradsync/k8s-tools}"
if [ -x "$dir/venv/bin/checkov" ] && [ -x "$dir/venv/bin/kubernetes-validate" ] && [ -f "$dir/ready" ]; then
  echo "$dir/venv"
  exit 0
fi
echo "k8s_tools_env: making $dir (kubernetes-validate, checkov from PyPI)" >&2
rm -rf "$dir"
mkdir -p "$dir"
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate checkov >&2
touch "$dir/ready"
echo "$dir/venv"
