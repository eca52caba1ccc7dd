# SPDX-License-Identifier: Apache-2.0
"""A rank SIGKILLed while the others wait in a CUDA allreduce: the others get
an error naming it within 10 s, and the GPU memory the daemon had mapped from
the dead rank is released (free memory returns to its level before the job).

Then the harder case: a rank that enqueues an allreduce behind a second of
GPU work on its stream and dies at once, so its ready event is recorded but
never reached. Whether the driver completes such an event is not documented;
the survivors must not hang (they finish or fail within 20 s), and the daemon
must serve a new job afterwards.

  python3 kill_check.py SOCKET      (a gradsyncd with a GPU serves SOCKET)
Exit code 0 when all of it holds; prints what it measured.
"""
import os
import signal
import subprocess
import sys
import time

import torch

RANK_CODE = r"""
import os, sys, time, signal, torch
import gradsync.torch as hvd
hvd.init()
device = torch.device("cuda", 0)
x = torch.ones(256 << 20, device=device)          # 1 GiB, exported to the daemon
hvd.allreduce_(x, op=hvd.Sum, name="first")
victim = hvd.rank() == hvd.size() - 1
if victim and os.environ.get("KILL") == "queued":
    torch.cuda._sleep(int(3e9))                  # about a second of GPU work ahead of the ready event
    hvd.allreduce_async_(x, op=hvd.Sum, name="second")
    os.kill(os.getpid(), signal.SIGKILL)
if victim and os.environ.get("KILL") == "1":
    time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    hvd.allreduce_(x, op=hvd.Sum, name="second")
    torch.cuda.synchronize()                      # the result is really there (or this hangs)
    print("rank %d: second allreduce succeeded after %.2f s" % (hvd.rank(), time.monotonic() - start))
    sys.exit(0 if os.environ.get("KILL") != "1" else 2)
except Exception as e:
    elapsed = time.monotonic() - start
    print("rank %d: failed after %.2f s: %s" % (hvd.rank(), elapsed, e))
    named = "rank %d" % (hvd.size() - 1) in str(e)
    sys.exit(0 if named and elapsed < 10 else 3)
"""


def run_job(socket, job, size, kill, timeout=60):
    procs = []
    for rank in range(size):
        env = dict(os.environ, GRADSYNC_SOCKET=socket, GRADSYNC_JOB_ID=job, GRADSYNC_TOKEN="kill-check",
                   GRADSYNC_RANK=str(rank), GRADSYNC_SIZE=str(size), GRADSYNC_LOCAL_RANK=str(rank),
                   GRADSYNC_LOCAL_SIZE=str(size), KILL=kill if isinstance(kill, str) else ("1" if kill else "0"))
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE], env=env))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    return codes


def free_bytes():
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info(0)[0]


def main():
    socket = sys.argv[1]
    torch.cuda.init()
    warm = run_job(socket, "kill-check-warm", 2, kill=False)  # the daemon's context and stream exist after this
    time.sleep(1)
    baseline = free_bytes()
    codes = run_job(socket, "kill-check", 3, kill=True)
    deadline = time.monotonic() + 10
    after = free_bytes()
    while baseline - after > (64 << 20) and time.monotonic() < deadline:
        time.sleep(0.5)
        after = free_bytes()
    survivors_ok = codes[:-1] == [0, 0] and codes[-1] == -signal.SIGKILL
    memory_ok = baseline - after <= (64 << 20)
    print("warm-up job exit codes %s; job exit codes %s (want [0, 0, -9])" % (warm, codes))
    print("free GPU memory: %.0f MiB before the job, %.0f MiB after (difference %.0f MiB, allowed 64)" % (
        baseline / 2**20, after / 2**20, (baseline - after) / 2**20))
    # The victim dies with its ready event recorded behind queued GPU work.
    started = time.monotonic()
    queued = run_job(socket, "kill-check-queued", 3, kill="queued", timeout=20)
    queued_ok = "timeout" not in queued and queued[-1] == -signal.SIGKILL
    print("rank killed with its ready event queued: exit codes %s after %.1f s (want no timeout; survivors 0 "
          "or 3)" % (queued, time.monotonic() - started))
    after_all = run_job(socket, "kill-check-after", 2, kill=False)
    serves_ok = after_all == [0, 0]
    print("a new job afterwards: exit codes %s" % after_all)
    ok = survivors_ok and memory_ok and queued_ok and serves_ok
    print("kill check:", "PASSED" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
