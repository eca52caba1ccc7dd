#!/usr/bin/python3
"""gloo_alltoall.py - PyTorch Gloo's all_to_all_single on N local ranks, the
peer figure for `gradsync_bench --collective alltoall` (same method: even
splits of a float32 tensor, barrier, time one call, MAX over ranks, median).

    /usr/bin/python3 tools/bench/gloo_alltoall.py -n 2 --sizes 1048576 8388608 67108864
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n, sizes, iters, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=n)
    torch.set_num_threads(1)
    for size in sizes:
        count = size // 4 // n * n
        x = torch.full((count,), float(rank + 1))
        y = torch.empty(count)
        dist.all_to_all_single(y, x)
        want = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(count // n)
        assert torch.equal(y, want), "wrong alltoall result"
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_to_all_single(y, x)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(t.item())
        if rank == 0:
            med = statistics.median(times)
            print(f"gloo alltoall {n} ranks {size:>10} B  median {med * 1e6:10.1f} us  "
                  f"busbw {size / med * (n - 1) / n / 1e9:.3f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 8 << 20, 64 << 20])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--port", type=int, default=29533)
    a = ap.parse_args()
    mp.spawn(run, args=(a.n, a.sizes, a.iters, a.port), nprocs=a.n)
