# SPDX-License-Identifier: Apache-2.0
"""An elastic job of CUDA tensors across two gradsyncd on one GPU, over NCCL
among the daemons (a communicator per epoch). Three ranks (node0: rank 0;
node1: ranks 1 and 2) train elastic_train.py's exact model on the GPU;
rank 2 SIGKILLs itself while a 32 MiB allreduce runs at step 5; the
survivors go on from the last commit at 2 ranks, over the communicator of
the next epoch. Checks the survivors' weights against the replayed
schedule, and that both daemons formed the communicator among them in
epoch 1 and in a later one.

  python3 elastic_nccl_check.py GRADSYNCD GRADSYNCCTL WORKDIR [cuda|cpu]

cuda needs NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1 (both daemons'
ranks on one GPU); cpu runs the same job with CPU tensors (no NCCL), to
check this script where there is no GPU. Exit code 0 when all of it held.
"""
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ELASTIC = os.path.join(HERE, "..", "elastic_tests")
sys.path.insert(0, ELASTIC)
from exact_model import replay  # noqa: E402
from two_daemons_check import start_daemon, wait_and_stop  # noqa: E402

PLACEMENT = [0, 1, 1]  # node of each rank
VICTIM = 2


def spawn_ranks(daemons, out, device):
    ranks = []
    for rank, node in enumerate(PLACEMENT):
        env = dict(os.environ, GRADSYNC_SOCKET=daemons[node][1], GRADSYNC_JOB_ID="elastic-nccl",
                   GRADSYNC_TOKEN="elastic-nccl", GRADSYNC_RANK=str(rank), GRADSYNC_SIZE=str(len(PLACEMENT)),
                   GRADSYNC_LOCAL_RANK=str(PLACEMENT[:rank].count(node)),
                   GRADSYNC_LOCAL_SIZE=str(PLACEMENT.count(node)), GRADSYNC_LEADER=daemons[0][2],
                   GRADSYNC_ELASTIC="1", GRADSYNC_MIN_SIZE="2", GRADSYNC_TEST_OUT=out,
                   GRADSYNC_TEST_VICTIM=str(VICTIM), GRADSYNC_TEST_DEVICE=device)
        log = open(os.path.join(out, "rank%d.log" % rank), "w")
        ranks.append((subprocess.Popen([sys.executable, os.path.join(ELASTIC, "elastic_train.py")], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log.name))
    return ranks


def check_results(out):
    """The survivors' results against the schedule: 5 steps at 3 ranks, then
    from the last commit 8 steps at 2 (60 samples, 2 per rank per step)."""
    problems = []
    expected = replay([(s, 3) for s in range(5)] + [(s, 2) for s in range(5, 13)])
    done = {int(p.rsplit(".", 1)[1]): json.load(open(p)) for p in glob.glob(os.path.join(out, "result.*"))}
    if sorted(done) != [0, 1]:
        problems.append("results from ranks %s, expected 0 and 1" % sorted(done))
    for rank, result in sorted(done.items()):
        weights = [float.fromhex(w) for w in result["weights"]]
        # Exact on the CPU; on the GPU the average's division may round.
        if any(abs(w - e) > 1e-12 * max(1.0, abs(e)) for w, e in zip(weights, expected)):
            problems.append("rank %d: weights %s, expected %s" % (rank, weights, expected))
        if (result["epoch"], result["size"], result["steps"]) != (2, 2, 13):
            problems.append("rank %d: epoch %s size %s steps %s, expected 2, 2, 13" %
                            (rank, result["epoch"], result["size"], result["steps"]))
    return problems


def check_communicators(workdir):
    """Both daemons formed the communicator among them in epoch 1 and later."""
    problems = []
    for name in ("node0", "node1"):
        lines = [line.rstrip() for line in open(os.path.join(workdir, name + ".log")) if "NCCL" in line]
        for line in lines:
            print("%s: %s" % (name, line))
        formed = [line for line in lines if "communicator among 2 daemons formed" in line]
        if not any(line.endswith("epoch 1)") for line in formed):
            problems.append("%s formed no NCCL communicator among the daemons in epoch 1" % name)
        if not any(not line.endswith("epoch 1)") for line in formed):
            problems.append("%s formed no NCCL communicator among the daemons after epoch 1" % name)
    return problems


def main():
    binary, ctl, workdir = sys.argv[1:4]
    device = sys.argv[4] if len(sys.argv) > 4 else "cuda"
    workdir = os.path.join(workdir, "elastic-nccl-" + device)
    os.makedirs(workdir, exist_ok=True)
    os.environ.setdefault("UCX_TLS", "tcp,self")
    daemons = [start_daemon(binary, ctl, workdir, name, "auto") for name in ("node0", "node1")]
    ranks = spawn_ranks(daemons, workdir, device)
    codes = wait_and_stop(ranks, daemons, int(os.environ.get("ELASTIC_NCCL_TIMEOUT", "150")))
    problems = ["rank %d exited %s" % (r, code) for r, code in enumerate(codes) if r != VICTIM and code != 0]
    if codes[VICTIM] != -9:
        problems.append("rank %d (the victim) exited %s, not by its SIGKILL" % (VICTIM, codes[VICTIM]))
    problems += check_results(workdir)
    if device == "cuda":
        problems += check_communicators(workdir)
    for rank, (_, path) in enumerate(ranks):
        print("rank %d (exit %s): %s" % (rank, codes[rank], " | ".join(open(path).read().splitlines()[-2:])))
    if problems:
        print("\n".join(["FAILED:"] + problems))
        for rank, (_, path) in enumerate(ranks):
            print("---- rank %d log tail\n%s" % (rank, "\n".join(open(path).read().splitlines()[-30:])))
        for name in ("node0", "node1"):
            print("---- %s log tail\n%s" % (name, "\n".join(open(os.path.join(workdir, name + ".log")).read()
                                                      .splitlines()[-40:])))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
