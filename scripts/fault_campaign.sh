#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fault campaign on demand: ROUNDS seeded rounds (default 100) of
# tests/fault/fault_campaign_test.cc; SEED picks the campaign. Prints each
# round and the summary line (hangs, unnamed errors, daemons lost).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-100}"
SEED="${SEED:-20261122}"
bazel test //tests/fault:fault_campaign_test --nocache_test_results --test_output=streamed \
  --test_timeout=3600 --test_env=GRADSYNC_CAMPAIGN_ROUNDS="$ROUNDS" --test_env=GRADSYNC_CAMPAIGN_SEED="$SEED" \
  2>&1 | grep -E '^round |^campaign |FAILED|PASSED|Failure|error' 
