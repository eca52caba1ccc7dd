# SPDX-License-Identifier: Apache-2.0
"""Allreduce of CUDA tensors through gradsyncd, ranks sharing the GPU(s):
a sweep of sizes (median time, algbw, busbw as nccl-tests counts them), the
ResNet-50 gradient set (161 tensors, 97.5 MiB) submitted separately, and on
rank 0 the references from the same process: a device-to-device copy (the
physical bound of the daemon's gather-reduce-scatter) and torch.distributed
NCCL with one rank (one GPU cannot host a 2-rank NCCL job before 2.30).

  gradsyncrun -np 2 python3 examples/pytorch/cuda_allreduce_bench.py
"""
import argparse
import os
import statistics
import tempfile
import time

import torch

import gradsync.torch as hvd



def resnet50_numels():
    import torchvision.models
    return [p.numel() for p in torchvision.models.resnet50().parameters()]


def timed(fn, iters, device):
    times = []
    for _ in range(iters):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sweep(device, size, iters):
    rows = []
    nbytes = 4
    while nbytes <= (256 << 20):
        x = torch.ones(nbytes // 4, device=device)
        name = "sweep.%d" % nbytes
        hvd.allreduce_(x, op=hvd.Sum, name=name)  # warm-up: exports the allocation once
        seconds = timed(lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), iters if nbytes < (64 << 20) else 10, device)
        algbw = nbytes / seconds / 1e9
        rows.append((nbytes, seconds * 1e6, algbw, algbw * 2 * (size - 1) / size))
        nbytes *= 4 if nbytes < (1 << 20) else 2
    return rows


def resnet_step(device, iters):
    tensors = [torch.ones(n, device=device) for n in resnet50_numels()]

    def step():
        handles = [hvd.allreduce_async_(t, op=hvd.Average, name="resnet.%d" % i) for i, t in enumerate(tensors)]
        for h in handles:
            hvd.synchronize(h)

    step()
    return timed(step, iters, device), sum(t.numel() * 4 for t in tensors), len(tensors)


def references(device):
    big = torch.empty(64 << 20, device=device)  # 256 MiB
    other = torch.empty_like(big)
    copy_s = timed(lambda: other.copy_(big), 20, device)
    out = {"d2d_copy_GBps_read_plus_write": 2 * big.numel() * 4 / copy_s / 1e9}
    try:
        import torch.distributed as dist
        store = tempfile.NamedTemporaryFile(delete=False)
        dist.init_process_group("nccl", init_method="file://" + store.name, rank=0, world_size=1,
                                device_id=device)
        tiny = torch.ones(1, device=device)
        dist.all_reduce(tiny)
        out["nccl_1rank_4B_us"] = timed(lambda: dist.all_reduce(tiny), 200, device) * 1e6
        big_nccl = torch.ones(64 << 20, device=device)
        out["nccl_1rank_256MiB_ms"] = timed(lambda: dist.all_reduce(big_nccl), 10, device) * 1e3
        dist.destroy_process_group()
        if os.path.exists(store.name):  # the file store may remove it itself
            os.unlink(store.name)
    except Exception as e:  # report, do not hide
        out["nccl_error"] = repr(e)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-resnet", action="store_true")
    args = p.parse_args()
    hvd.init()
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    rows = sweep(device, hvd.size(), args.iters)
    resnet = None if args.no_resnet else resnet_step(device, 20)
    hvd.barrier()
    refs = references(device) if hvd.rank() == 0 else None
    hvd.barrier()
    if hvd.rank() == 0:
        print("gradsync CUDA allreduce, float32 sum, %d ranks on %s (%s)" % (
            hvd.size(), torch.cuda.get_device_name(device), "MPS on" if os.path.exists(
                os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"), "control")) else "MPS off"))
        print("%12s %12s %12s %12s" % ("bytes", "time us", "algbw GB/s", "busbw GB/s"))
        for nbytes, us, algbw, busbw in rows:
            print("%12d %12.1f %12.2f %12.2f" % (nbytes, us, algbw, busbw))
        if resnet:
            seconds, nbytes, count = resnet
            print("ResNet-50 gradient set: %d tensors, %.1f MiB: %.2f ms per step" % (count, nbytes / 2**20, seconds * 1e3))
        for key, value in refs.items():
            print("reference %s: %s" % (key, "%.2f" % value if isinstance(value, float) else value))
    hvd.shutdown()


if __name__ == "__main__":
    main()
