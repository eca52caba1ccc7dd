# SPDX-License-Identifier: Apache-2.0
"""What a Horovod Elastic reset costs in rendezvous, measured with PyTorch's
Gloo (Horovod itself does not install offline here): after a membership
change Horovod shuts down and re-initialises, which makes three Gloo
contexts (global, local, cross), each a rendezvous through a key-value
store, before the survivors' first collective. Each of N processes times
three init_process_group("gloo") + barrier + destroy in a row, REPS times;
prints the median per reset as JSON. Usage: gloo_rendezvous.py N [REPS]."""
import json
import os
import statistics
import sys
import time

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, size, port, reps, queue):
    times = []
    for rep in range(reps):
        start = time.perf_counter()
        for context in range(3):
            store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout=__import__("datetime").timedelta(seconds=60))
            dist.init_process_group("gloo", store=dist.PrefixStore("r%d.%d" % (rep, context), store), rank=rank,
                                    world_size=size)
            dist.barrier()
            dist.destroy_process_group()
            del store
            port += 1
        times.append(time.perf_counter() - start)
    queue.put((rank, times))


if __name__ == "__main__":
    size = int(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    port = 29500 + (os.getpid() % 1000) * 20
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(worker, args=(size, port, reps, queue), nprocs=size, start_method="spawn")
    per_rank = [queue.get() for _ in range(size)]
    resets = [max(times[i] for _, times in per_rank) for i in range(reps)]
    print(json.dumps({"ranks": size, "three_gloo_rendezvous_ms_median": round(statistics.median(resets) * 1e3, 1)}))
