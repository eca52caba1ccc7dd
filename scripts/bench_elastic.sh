#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Elastic jobs: commit() cost for a model of MODEL_MB MB and the time from a
# SIGKILL to the survivors' first collective of the new epoch, for NPS ranks
# on one daemon (default "3 2"; each run kills the last rank), then for
# DAEMONS daemons with one rank each (default "2 3": the loss crosses
# daemons), REPS times interleaved. Where the PyPI torch environment of
# scripts/pypi_torch_env.sh exists, also what Horovod Elastic's reset needs
# in rendezvous alone: three Gloo rendezvous (tools/bench/elastic/gloo_rendezvous.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //client:libgradsync.so //daemon/exe:gradsyncd //tools/gradsyncctl >/dev/null 2>&1
export GRADSYNC_LIBRARY="$PWD/bazel-bin/client/libgradsync.so" GRADSYNC_DAEMON="$PWD/bazel-bin/daemon/exe/gradsyncd"
export GRADSYNC_CTL="$PWD/bazel-bin/tools/gradsyncctl/gradsyncctl"
model_mb="${MODEL_MB:-100}"
for rep in $(seq "${REPS:-3}"); do for np in ${NPS:-3 2}; do
  out="$(mktemp -d)"
  client/python/bin/gradsyncrun --private-daemon -np "$np" --min-np $((np - 1)) --on-rank-failure blacklist-host \
    /usr/bin/python3 tools/bench/elastic/elastic_bench.py --model-mb "$model_mb" --out "$out" 2>/dev/null |
    sed -n 's/^\[0\]<stdout>: //p'
  /usr/bin/python3 - "$out" "$np" <<'PY'
import glob, json, statistics, sys
out, np = sys.argv[1], int(sys.argv[2])
killed = float(open(out + "/killed_at").read())
ranks = [json.load(open(p)) for p in glob.glob(out + "/rank.*")]
detect = [r["detected"] - killed for r in ranks]
first = [r["first_collective"] - killed for r in ranks]
print(json.dumps({"ranks": np, "survivors": len(ranks), "detect_ms_max": round(max(detect) * 1e3, 1),
                  "first_collective_of_new_epoch_ms_max": round(max(first) * 1e3, 1)}))
PY
  rm -rf "$out"
done
for daemons in ${DAEMONS:-2 3}; do
  PYTHONPATH="$PWD/client/python" /usr/bin/python3 tools/bench/elastic/run_across.py "$daemons" "$model_mb"
done
torch_env="${GRADSYNC_TORCH_ENV:-/var/cache/gradsync/torch-pypi-2.15.0}/env.sh"
if [ -f "$torch_env" ]; then
  for np in ${NPS:-3 2}; do
    (source "$torch_env" && "$PYTHON" tools/bench/elastic/gloo_rendezvous.py "$np" 3 2>/dev/null)
  done
fi
done
