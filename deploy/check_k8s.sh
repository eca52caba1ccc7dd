#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the Kubernetes manifests (deploy/k8s): every resource against the
# current API schemas, strictly (kubernetes-validate), no failed check of
# the policy scanner checkov (each exception is a skip annotation on its
# resource, with the reason), and the DaemonSet drains its daemon before a
# rolling update stops it. Tools from scripts/k8s_tools_env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(scripts/k8s_tools_env.sh)
"$tools/bin/kubernetes-validate" --strict --quiet deploy/k8s/*.yaml
echo "k8s: the manifests match the Kubernetes $("$tools/bin/python" -c 'import kubernetes_validate.utils as u; print(u.latest_version())' 2>/dev/null || echo current) schemas"
# Offline: no guideline download (BC_SKIP_MAPPING), no telemetry.
report=$(BC_SKIP_MAPPING=TRUE CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false "$tools/bin/checkov" -d deploy/k8s \
  --framework kubernetes --compact --quiet 2>/dev/null || true)
summary=$(grep -E "^Passed checks" <<< "$report" || true)
echo "k8s: checkov: ${summary:-no summary}"
if [ -z "$summary" ] || grep -q "FAILED for resource" <<< "$report"; then
  echo "$report" >&2
  exit 1
fi
grep -q "preStop" deploy/k8s/daemonset.yaml && grep -q "gradsyncctl drain" deploy/k8s/daemonset.yaml
echo "k8s: ok"
