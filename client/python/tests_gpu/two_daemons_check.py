# SPDX-License-Identifier: Apache-2.0
"""Two gradsyncd on one GPU as the stand-in for two nodes: the CUDA suite
with 2 ranks per daemon, the daemons joined over loopback. CUDA tensors go
between the daemons through NCCL (--gpu-cross-node auto: needs NCCL >= 2.30
and NCCL_MULTI_RANK_GPU_ENABLE=1 for two ranks on one GPU; otherwise the
daemons fall back) or through host memory and the UCX ring (staging). The
daemons' logs say which ran; this script prints those lines.

  python3 two_daemons_check.py GRADSYNCD GRADSYNCCTL WORKDIR [auto|staging|nccl]
nccl runs auto and also fails unless both daemons formed the NCCL communicator.
TWO_DAEMONS_FLAGS: more flags for both daemons (split at spaces);
TWO_DAEMONS_K: a pytest -k expression, the tests to run.
Exit code 0 when every rank passed.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def start_daemon(binary, ctl, workdir, name, transport):
    socket = os.path.join(workdir, name + ".sock")
    log = open(os.path.join(workdir, name + ".log"), "w")
    process = subprocess.Popen([binary, "--socket-path", socket, "--peer-address", "127.0.0.1:0",
                                "--stall-deadline-seconds", "60", "--gpu-cross-node", transport]
                               + os.environ.get("TWO_DAEMONS_FLAGS", "").split(),
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = subprocess.run([ctl, "--socket", socket, "status", "--json"], capture_output=True, text=True)
        if status.returncode == 0:
            return process, socket, json.loads(status.stdout)["peer_address"]
        time.sleep(0.2)
    raise RuntimeError("gradsyncd %s did not start" % name)


def wait_and_stop(ranks, daemons, timeout):
    """Each rank's exit code ("timeout": killed past `timeout` s), then the
    daemons stopped."""
    codes = []
    for process, _ in ranks:
        try:
            codes.append(process.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append("timeout")
    for process, _, _ in daemons:
        process.terminate()
        process.wait(timeout=15)
    return codes


def main():
    binary, ctl, workdir = sys.argv[1:4]
    transport = sys.argv[4] if len(sys.argv) > 4 else "auto"
    required_nccl = transport == "nccl"
    transport = "auto" if required_nccl else transport
    workdir = os.path.join(workdir, "two-daemons-" + transport)
    os.makedirs(workdir, exist_ok=True)
    os.environ.setdefault("UCX_TLS", "tcp,self")
    daemons = [start_daemon(binary, ctl, workdir, name, transport) for name in ("node0", "node1")]
    leader = daemons[0][2]
    per_node, size = 2, 4
    ranks = []
    for rank in range(size):
        node = rank // per_node
        env = dict(os.environ, GRADSYNC_SOCKET=daemons[node][1], GRADSYNC_JOB_ID="two-daemons",
                   GRADSYNC_TOKEN="two-daemons", GRADSYNC_RANK=str(rank), GRADSYNC_SIZE=str(size),
                   GRADSYNC_LOCAL_RANK=str(rank % per_node), GRADSYNC_LOCAL_SIZE=str(per_node),
                   GRADSYNC_LEADER=leader)
        log = open(os.path.join(workdir, "rank%d.log" % rank), "w")
        only = ["-k", os.environ["TWO_DAEMONS_K"]] if os.environ.get("TWO_DAEMONS_K") else []
        ranks.append((subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + only +
                                       [os.path.join(HERE, "test_cuda_collectives.py"),
                                        os.path.join(HERE, "test_cuda_optimizer.py")],
                                       cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT), log.name))
    codes = wait_and_stop(ranks, daemons, int(os.environ.get("TWO_DAEMONS_TIMEOUT", "240")))
    for rank, (_, path) in enumerate(ranks):
        lines = open(path).read().splitlines()
        print("rank %d (exit %s): %s" % (rank, codes[rank], " | ".join(lines[-3:])))
    formed = 0
    for name in ("node0", "node1"):
        for line in open(os.path.join(workdir, name + ".log")):
            if "NCCL" in line and ("communicator" in line or "no NCCL" in line):
                print("%s: %s" % (name, line.rstrip()))
                formed += "communicator among" in line and "formed" in line
    if required_nccl and formed < 2:
        print("NCCL was required between the daemons, and %d of 2 formed it" % formed)
        codes.append("no NCCL")
    if any(code != 0 for code in codes):
        for rank, (_, path) in enumerate(ranks):
            if codes[rank] != 0:
                print("---- rank %d log tail" % rank)
                print("\n".join(open(path).read().splitlines()[-40:]))
        for name in ("node0", "node1"):
            print("---- %s log tail" % name)
            print("\n".join(open(os.path.join(workdir, name + ".log")).read().splitlines()[-30:]))
    sys.exit(0 if all(code == 0 for code in codes) else 1)


if __name__ == "__main__":
    main()
