# SPDX-License-Identifier: Apache-2.0
"""The c10d backend against Gloo and against gradsync.torch, in the same
processes, interleaved step by step (A B A B: drift hits all alike).

    torchrun --standalone --nproc-per-node 2 tools/bench/c10d_bench.py [--steps 15]

(PYTHONPATH=client/python, GRADSYNC_LIBRARY/GRADSYNC_DAEMON as for the
tests; scripts/bench_c10d.sh sets them.) The default group is Gloo; a second
group of the same ranks runs on gradsync, and gradsync.torch joins the
node's daemon (the one the backend found or started) as a job of its own.

  ddp_buckets  the ResNet-50 gradient set (161 tensors, 97.5 MiB) through
               DDP's buckets (bucket_cap_mb=25): backward of a loss whose
               gradients cost nothing to compute, so the step is DDP's
               communication and its copies into and out of the buckets;
  ddp_as_view  the same with gradient_as_bucket_view=True (no copy out);
               each also under "no communication": a comm hook that hands
               the bucket back untouched, so the step is DDP's own work
               (gradients, bucket copies): the floor under any backend;
  grouped      the same set as one gradsync.torch grouped allreduce (the
               Horovod path), and as c10d allreduce_coalesced;
  small        one 4-byte allreduce, synchronous: the per-call cost;
  e2e          (--e2e; needs torchvision) a DDP step of torchvision's
               ResNet-18 (batch 16 of 64x64 images, forward and backward)
               on Gloo, on gradsync, and under no_sync (the compute alone),
               and ResNet-18's gradient set through DDP's buckets alone: how
               much of the communication backward hid.
Rank 0 prints medians (ms) and the ratios per interleaved pair.

Across nodes (scripts/bench_c10d.sh --nnodes 2: two torchrun agents on
loopback, each node with its own daemon, gradsync between daemons over TCP)
the gradsync.torch cases are left out: its job would need a leader of its
own.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def resnet50_shapes():
    """torchvision's ResNet-50 parameter shapes, in registration order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            for cout, cin_, k in ((width, cin, 1), (width, width, 3), (width * 4, width, 1)):
                shapes += [(cout, cin_, k, k), (cout,), (cout,)]
            if b == 0:
                shapes += [(width * 4, cin, 1, 1), (width * 4,), (width * 4,)]
            cin = width * 4
    return shapes + [(1000, 2048), (1000,)]


class GradientSet(nn.Module):
    """Parameters of the given shapes (ResNet-50's by default); backward of
    forward() gives each a gradient at almost no cost."""

    def __init__(self, shapes=None):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(s)) for s in shapes or resnet50_shapes()])

    def forward(self):
        return sum(p.view(-1)[0] for p in self.params)


def end_to_end_cases(DDP, ours):
    import torchvision
    torch.manual_seed(0)
    shapes = [tuple(p.shape) for p in torchvision.models.resnet18().parameters()]
    nets = {name: DDP(torchvision.models.resnet18(), process_group=group)
            for name, group in (("gloo", None), ("gradsync", ours))}
    x = torch.randn(16, 3, 64, 64)
    y = torch.randint(0, 1000, (16,))
    loss = nn.CrossEntropyLoss()
    comm = DDP(GradientSet(shapes), process_group=ours)

    def step(name, sync=True):
        def run():
            net = nets[name]
            net.zero_grad(set_to_none=False)
            if sync:
                loss(net(x), y).backward()
            else:
                with net.no_sync():
                    loss(net(x), y).backward()
        return run
    return {"e2e": {"gloo": step("gloo"), "gradsync c10d": step("gradsync"),
                    "compute only (no_sync)": step("gradsync", sync=False),
                    "gradsync comm alone": lambda: comm().backward()}}


def no_communication(state, bucket):
    """A DDP comm hook that reduces nothing: the bucket comes back as is."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def timed(fn):
    dist.barrier()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--small-calls", type=int, default=200)
    parser.add_argument("--e2e", action="store_true", help="only the ResNet-18 end-to-end step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import gradsync.torch.distributed  # noqa: F401 (registers the backend)
    dist.init_process_group("gloo")
    ours = dist.new_group(list(range(dist.get_world_size())), backend="gradsync")
    one_node = int(os.environ.get("GROUP_WORLD_SIZE", "1")) == 1
    hvd = None
    if one_node:
        os.environ["GRADSYNC_SOCKET"] = ours._node_daemon.socket_path
        import gradsync.torch as hvd
        hvd.init()
    from torch.nn.parallel import DistributedDataParallel as DDP
    models = {}
    for name, group in (("gloo", None), ("gradsync", ours), ("floor", None)):
        for view in (False, True):
            models[name, view] = DDP(GradientSet(), process_group=group, bucket_cap_mb=25,
                                     gradient_as_bucket_view=view)
            if name == "floor":
                models[name, view].register_comm_hook(None, no_communication)
    grads = [torch.randn(s) for s in resnet50_shapes()]
    small = torch.ones(1)

    def ddp_step(name, view=False):
        return lambda: models[name, view]().backward()

    def small_calls(fn):
        def run():
            for _ in range(args.small_calls):
                fn()
        return run
    cases = {
        "ddp_buckets": {"gloo": ddp_step("gloo"), "gradsync c10d": ddp_step("gradsync"),
                        "no communication": ddp_step("floor")},
        "ddp_as_view": {"gloo": ddp_step("gloo", True), "gradsync c10d": ddp_step("gradsync", True),
                        "no communication": ddp_step("floor", True)},
        "grouped": {"gloo coalesced": lambda: dist.all_reduce_coalesced(grads),
                    "gradsync c10d coalesced": lambda: dist.all_reduce_coalesced(grads, group=ours)},
        "small": {"gloo": small_calls(lambda: dist.all_reduce(small)),
                  "gradsync c10d": small_calls(lambda: dist.all_reduce(small, group=ours))},
    }
    if hvd is not None:
        cases["grouped"]["gradsync.torch grouped"] = lambda: hvd.grouped_allreduce_(grads, op=hvd.Sum)
        cases["small"]["gradsync.torch"] = small_calls(lambda: hvd.allreduce_(small, op=hvd.Sum))
    if args.e2e:
        cases = end_to_end_cases(DDP, ours)
    for case, fns in cases.items():
        times = {name: [] for name in fns}
        names = list(fns)
        for step in range(args.steps + 2):
            for name in (names if step % 2 == 0 else names[::-1]):
                t = timed(fns[name])
                if step >= 2:  # warm-up
                    times[name].append(t / (args.small_calls if case == "small" else 1))
        if dist.get_rank() == 0:
            base = names[0]
            for name in names:
                ratios = [b / a for a, b in zip(times[name], times[base])]
                unit, scale = ("us", 1e6) if case == "small" else ("ms", 1e3)
                print("%-12s %-26s median %9.2f %s   %s/this per pair: median %.2fx" % (
                    case, name, statistics.median(times[name]) * scale, unit, base, statistics.median(ratios)))
            sys.stdout.flush()
    if hvd is not None:
        hvd.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
