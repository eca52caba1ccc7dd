# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer's step on ResNet-50's gradient set (161 tensors,
97.5 MiB of float32), zero copy (the default) against the copy path
(zero_copy_gradients=False), interleaved round by round. Run it under
gradsyncrun, e.g.

  gradsyncrun --private-daemon -np 2 python3 tools/bench/optimizer_step.py

Autograd's part of a step is a sum over the parameters (gradients of
ones), so the step time is mostly the optimizer's hooks and the daemon's
allreduce; `local` is the same step without gradsync, for reference.
Rank 0 prints the median step time of each mode."""
import argparse
import gc
import statistics
import time

import torch

import gradsync.torch as hvd


def resnet50_shapes():
    """torchvision's ResNet-50 parameter shapes in registration order (the
    list tools/bench/resnet50_shapes.h and the peers' scripts use)."""
    shapes = []

    def conv(cin, cout, k):
        shapes.append((cout, cin, k, k))

    def bn(c):
        shapes.extend([(c,), (c,)])

    conv(3, 64, 7)
    bn(64)
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            conv(cin, width, 1)
            bn(width)
            conv(width, width, 3)
            bn(width)
            conv(width, width * 4, 1)
            bn(width * 4)
            if b == 0:
                conv(cin, width * 4, 1)
                bn(width * 4)
            cin = width * 4
    shapes.extend([(1000, 2048), (1000,)])
    return shapes


def timed_steps(params, optimizer, warmup, steps):
    def step():
        optimizer.zero_grad()
        sum(p.sum() for p in params).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    hvd.init()
    results = {"zero_copy": [], "copy": [], "local": []}
    for _ in range(args.rounds):
        for mode in ("zero_copy", "copy", "local"):
            # Fresh parameters: an optimizer's hooks stay on the ones it wrapped.
            params = [torch.zeros(s, requires_grad=True) for s in resnet50_shapes()]
            named = [("p%d" % i, p) for i, p in enumerate(params)]
            sgd = torch.optim.SGD(params, lr=0.0)
            optimizer = sgd if mode == "local" else hvd.DistributedOptimizer(
                sgd, named_parameters=named, zero_copy_gradients=(mode == "zero_copy"))
            results[mode].append(timed_steps(params, optimizer, args.warmup, args.steps))
            del optimizer, sgd
            gc.collect()
    if hvd.rank() == 0:
        nbytes = sum(p.numel() * p.element_size() for p in params)
        print("ResNet-50 gradient set: %d tensors, %.1f MiB; %d ranks; median of %d rounds x %d steps"
              % (len(params), nbytes / 2**20, hvd.size(), args.rounds, args.steps))
        for mode, values in results.items():
            print("%-9s step %.1f ms (rounds: %s)" % (mode, 1e3 * statistics.median(values),
                                                       ", ".join("%.1f" % (1e3 * v) for v in values)))
    hvd.shutdown()


if __name__ == "__main__":
    main()
