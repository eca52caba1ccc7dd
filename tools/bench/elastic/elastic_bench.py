# SPDX-License-Identifier: Apache-2.0
"""Elastic benchmark, one rank of `gradsyncrun -np N --min-np N-1` (see
scripts/bench_elastic.sh): the cost of TorchState.commit() for a model of
--model-mb MB, and the recovery from a SIGKILL: the victim (last rank) notes
the time and kills itself; each survivor notes when it saw the error
(detection) and when its first collective of the new epoch completed
(restore + rejoin + state broadcast + one allreduce). Prints JSON lines."""
import argparse
import json
import os
import signal
import statistics
import time

import torch

import gradsync.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--model-mb", type=int, default=100)
parser.add_argument("--commits", type=int, default=10)
parser.add_argument("--out", required=True)
args = parser.parse_args()

hvd.init()
first_rank, first_size = hvd.rank(), hvd.size()
model = torch.nn.Linear(args.model_mb * (1 << 18) // 1024, 1024, bias=False)  # model_mb MB of float32
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
state = hvd.elastic.TorchState(model, optimizer, step=0)
marks = {}


@hvd.elastic.run
def train(state):
    if "detected" in marks and "first_collective" not in marks:
        hvd.allreduce(torch.ones(1), name="first_of_epoch.%d" % hvd.elastic.epoch())
        marks["first_collective"] = time.time()
        return
    times = []
    for _ in range(args.commits):
        start = time.perf_counter()
        state.commit()
        times.append(time.perf_counter() - start)
    if first_rank == 0:
        print(json.dumps({"commit_ms_median": round(statistics.median(times) * 1e3, 2),
                          "model_mb": args.model_mb, "ranks": first_size}), flush=True)
    hvd.barrier()
    if first_rank == first_size - 1:
        with open(os.path.join(args.out, "killed_at"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        hvd.allreduce(torch.ones(1), name="after_the_kill")
        time.sleep(60)  # not reached: the allreduce fails
    except hvd.HorovodInternalError:
        marks["detected"] = time.time()
        raise


train(state)
with open(os.path.join(args.out, "rank.%d" % first_rank), "w") as f:
    json.dump(marks, f)
