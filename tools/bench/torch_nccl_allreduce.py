#!/usr/bin/python3
"""torch_nccl_allreduce.py - torch.distributed's NCCL allreduce with N ranks
on one GPU, the peer figure for gradsync's CUDA allreduce (same method as
examples/pytorch/cuda_allreduce_bench.py: float32 sum, median of timed calls,
busbw as nccl-tests counts it). Several ranks on one GPU need NCCL >= 2.30 and
NCCL_MULTI_RANK_GPU_ENABLE=1; preload that library where PyTorch brings an
older one:

    NCCL_MULTI_RANK_GPU_ENABLE=1 LD_PRELOAD=/path/libnccl.so.2 \
        python3 tools/bench/torch_nccl_allreduce.py -n 2
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
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=device)
    if rank == 0:
        with open("/proc/self/maps") as maps:
            libraries = sorted({line.split()[-1] for line in maps if "libnccl" in line})
        print("torch %s, NCCL %s (%s), %d ranks on %s" % (
            torch.__version__, ".".join(map(str, torch.cuda.nccl.version())), ", ".join(libraries) or "not mapped",
            n, torch.cuda.get_device_name(device)), flush=True)
    for size in sizes:
        x = torch.full((size // 4,), float(rank + 1), device=device)
        dist.all_reduce(x)
        torch.cuda.synchronize(device)
        assert x[0].item() == n * (n + 1) / 2, "wrong allreduce result %s" % x[0].item()
        times = []
        for _ in range(iters if size < (64 << 20) else max(5, iters // 3)):
            dist.barrier()
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            dist.all_reduce(x)
            torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        if rank == 0:
            med = statistics.median(times)
            algbw = size / med / 1e9
            print(f"torch nccl allreduce {n} ranks {size:>10} B  median {med * 1e6:10.1f} us  "
                  f"algbw {algbw:.2f} GB/s  busbw {algbw * 2 * (n - 1) / n:.2f} GB/s", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+",
                        default=[4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--port", type=int, default=29531)
    args = parser.parse_args()
    mp.spawn(run, args=(args.n, args.sizes, args.iters, args.port), nprocs=args.n)


if __name__ == "__main__":
    main()
