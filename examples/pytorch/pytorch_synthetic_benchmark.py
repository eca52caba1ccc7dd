# SPDX-License-Identifier: Apache-2.0
"""Synthetic-data training throughput, in the manner of Horovod's
pytorch_synthetic_benchmark.py. Run under gradsyncrun:

  gradsyncrun -np 2 python3 examples/pytorch/pytorch_synthetic_benchmark.py --model convnet
  gradsyncrun -np 2 python3 examples/pytorch/pytorch_synthetic_benchmark.py --backend ddp-gloo

--backend ddp-gloo runs the same model and batch with PyTorch DDP over Gloo
(ranks from gradsyncrun's GRADSYNC_RANK/SIZE), for comparison; --backend
single runs one process without any synchronisation (run it without
gradsyncrun), the baseline for ranks sharing one GPU. --cuda trains on the
GPU (rank r uses device r % device_count).
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(name, num_classes=10):
    if name == "convnet":  # small: runs in minutes on two CPU cores
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, num_classes))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                             nn.ReLU(), nn.Linear(1024, num_classes))
    import torchvision.models  # e.g. resnet18, resnet50 when torchvision is installed
    return getattr(torchvision.models, name)(num_classes=1000)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="convnet", help="convnet, mlp, or a torchvision model name")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=5)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--backend", choices=["gradsync", "ddp-gloo", "single"], default="gradsync")
    p.add_argument("--cuda", action="store_true", help="train on the GPU")
    p.add_argument("--fp16-allreduce", action="store_true")
    p.add_argument("--copy", action="store_true",
                   help="gradients copied into and out of the daemon's memory, not allocated in the shared arena "
                        "(gradsync only; the arena is DistributedOptimizer's default)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--master-port", default="29533", help="ddp-gloo rendezvous port")
    return p.parse_args()


class Gradsync:
    def __init__(self, args, model):
        import gradsync.torch as hvd
        self.hvd = hvd
        hvd.init()
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                  compression=compression, zero_copy_gradients=not args.copy)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.model, self.rank, self.size = model, hvd.rank(), hvd.size()
        self.wait_seconds = 0.0

    def step(self, data, target):
        self.optimizer.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        start = time.perf_counter()
        self.optimizer.synchronize()  # waiting for the gradients' allreduces
        self.wait_seconds += time.perf_counter() - start
        with self.optimizer.skip_synchronize():
            self.optimizer.step()

    def gather(self, value):
        return self.hvd.allgather_object(value)


class Single:
    def __init__(self, args, model):
        self.model, self.rank, self.size = model, 0, 1
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self.wait_seconds = 0.0

    def step(self, data, target):
        self.optimizer.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        self.optimizer.step()

    def gather(self, value):
        return [value]


class DdpGloo:
    def __init__(self, args, model):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.size = int(os.environ["GRADSYNC_RANK"]), int(os.environ["GRADSYNC_SIZE"])
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", args.master_port)
        dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
        self.model = nn.parallel.DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01 * self.size)
        self.wait_seconds = 0.0  # not measured: DDP waits inside backward()

    def step(self, data, target):
        self.optimizer.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        self.optimizer.step()

    def gather(self, value):
        out = [None] * self.size
        self.dist.all_gather_object(out, value)
        return out


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    if args.cuda:
        device = torch.device("cuda", int(os.environ.get("GRADSYNC_LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = build_model(args.model).to(device)
    runner = {"gradsync": Gradsync, "ddp-gloo": DdpGloo, "single": Single}[args.backend](args, model)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 10, (args.batch_size,), device=device)

    def sync():
        if args.cuda:
            torch.cuda.synchronize(device)

    for _ in range(args.num_warmup_batches):
        runner.step(data, target)
    sync()
    rates, waits = [], []
    for _ in range(args.num_iters):
        runner.wait_seconds = 0.0
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            runner.step(data, target)
        sync()
        elapsed = time.perf_counter() - start
        rates.append(args.batch_size * args.num_batches_per_iter / elapsed)
        waits.append(runner.wait_seconds / args.num_batches_per_iter)
    rate = statistics.median(rates)
    wait_ms = statistics.median(waits) * 1e3
    gathered = runner.gather((rate, wait_ms))
    if runner.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print("model %s (%.2f M params), batch %d per rank, %d ranks, backend %s%s%s" % (
            args.model, params / 1e6, args.batch_size, runner.size, args.backend,
            ", fp16 allreduce" if args.fp16_allreduce else "", ", gradients copied" if args.copy and args.backend == "gradsync" else ""))
        print("img/sec per rank: %.1f (median of %d iterations); total: %.1f; step time %.1f ms" % (
            statistics.median(r for r, _ in gathered), args.num_iters, sum(r for r, _ in gathered),
            1e3 * args.batch_size / statistics.median(r for r, _ in gathered)))
        if args.backend == "gradsync":
            print("waiting for gradients per step: %.2f ms (median, rank 0)" % wait_ms)


if __name__ == "__main__":
    main()
