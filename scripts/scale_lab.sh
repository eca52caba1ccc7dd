#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The scale lab, one command (a benchmark, not a test; about 10 minutes on
# a 2-core machine):
#  1. the control plane of one job in one process, no daemons
#     (daemon/peer/control_plane_bench.cc): W ranks up to 32,768, T tensors
#     in {16, 161, 1000}: the leader's and a follower's time per step, the
#     bytes a follower receives, the largest message, the heap;
#  2. real daemons on this machine, N in $NODES (default 2,4,8,16), one rank
#     each, UCX over loopback TCP (tools/bench/scale_lab.py): 4 B / 64 KiB /
#     1 MiB allreduce (and of each of $COLLECTIVES: e.g.
#     allreduce,allgather,reducescatter) and the ResNet-50 set, CPU and control bytes per step
#     at the leader and a follower, the algorithm chosen, Open MPI over TCP
#     with N ranks in the same run, and one node of N lost (SIGKILL):
#     detection and recovery;
#  3. the swarm (tools/swarm): one real leader against SWARM (default
#     128,256,512,1024) simulated follower daemons of one rank each, and
#     the most of them again with 8 ranks each, steps of 161 empty
#     allreduces: the first step's time, a cached step's, the leader's
#     CPU, threads and memory, bytes per step; then an election: a real
#     leader and candidate among SWARM_ELECTION (default 1024) simulated
#     followers, the leader killed: the time to the new leader, the
#     candidate's threads and CPU.
#   scripts/scale_lab.sh            NODES=2,4,8,16,32 SWARM=256 scripts/scale_lab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Open MPI and mpi4py: the peer measured in the same run (part 2).
scripts/install_deps.sh openmpi-bin python3-mpi4py
NODES=${NODES:-2,4,8,16}
PEERS=${PEERS:-$(cd .. && pwd)/shared/bench/peers}
SWARM=${SWARM:-128,256,512,1024}
bazel build -c opt //daemon/peer:control_plane_bench //:gradsyncd //:gradsync_bench //tests/integration:worker \
  //tools/swarm >&2
echo "## 1. The control plane in one process (8 ranks per node)"
for tensors in 16 161 1000; do
  for ranks in 512 4096 32768; do
    if ((ranks * tensors > ${CONTROL_PLANE_BUDGET:-600000})); then continue; fi
    bazel-bin/daemon/peer/control_plane_bench --ranks "$ranks" --tensors "$tensors" --steps 4
  done
done
echo
echo "## 2. Real daemons (one rank each, UCX over loopback TCP)"
mpi=()
if command -v mpirun >/dev/null && [ -f "$PEERS/allreduce_sweep.py" ] &&
  /usr/bin/python3 -c "import mpi4py, numpy" 2>/dev/null; then
  mpi=(--mpi --peers "$PEERS")
else
  echo "(no Open MPI with mpi4py here, or no peers' scripts at $PEERS: its column stays empty)"
fi
python3 tools/bench/scale_lab.py --daemon bazel-bin/daemon/exe/gradsyncd --bench bazel-bin/tools/bench/gradsync_bench \
  --worker bazel-bin/tests/integration/worker --nodes "$NODES" --collectives "${COLLECTIVES:-allreduce}" \
  --lose-one "${mpi[@]}" \
  --swarm bazel-bin/tools/swarm/swarm --swarm-followers "$SWARM" --swarm-election "${SWARM_ELECTION:-1024}"
