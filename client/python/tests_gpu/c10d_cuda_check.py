# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend on CUDA tensors (run by scripts/gpu_check.sh
under torchrun, every rank on GPU 0, the daemon at $GRADSYNC_SOCKET): each
collective with an in-place or output-buffer path against values computed
here, then DDP steps whose weights must agree on every rank and with the
same steps on the CPU through the backend."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import gradsync.torch.distributed  # noqa: F401 (registers the backend)


def close(a, b, what):
    assert a.shape == b.shape and torch.allclose(a.double().cpu(), b.double().cpu(), rtol=1e-3, atol=1e-3), (what, a, b)


def collectives(dev, r, n):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        t = torch.full((1000,), r + 1, dtype=dtype, device=dev)
        dist.all_reduce(t)
        close(t, torch.full((1000,), n * (n + 1) // 2, dtype=dtype), "allreduce %s" % dtype)
    t = torch.full((4,), float(r + 1), device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    close(t, torch.full((4,), (n + 1) / 2), "allreduce avg")
    t = torch.full((7,), float(r), device=dev)
    dist.broadcast(t, src=n - 1)
    close(t, torch.full((7,), float(n - 1)), "broadcast")
    out = torch.zeros(n * 3, device=dev)
    dist.all_gather_into_tensor(out, torch.full((3,), float(r), device=dev))
    close(out, torch.arange(n).repeat_interleave(3).float(), "all_gather_into_tensor")
    outs = [torch.zeros(2, device=dev) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), float(r), device=dev))
    for k, o in enumerate(outs):
        close(o, torch.full((2,), float(k)), "all_gather")
    out = torch.zeros(2, device=dev)
    dist.reduce_scatter_tensor(out, torch.arange(2.0 * n, device=dev) * (r + 1))
    close(out, torch.arange(2.0 * r, 2.0 * r + 2) * sum(range(1, n + 1)), "reduce_scatter_tensor")
    send = torch.cat([torch.full((k + 1,), float(10 * r + k)) for k in range(n)]).to(dev)
    got = torch.zeros(n * (r + 1), device=dev)
    dist.all_to_all_single(got, send, output_split_sizes=[r + 1] * n, input_split_sizes=[k + 1 for k in range(n)])
    close(got, torch.cat([torch.full((r + 1,), float(10 * k + r)) for k in range(n)]), "all_to_all_single")


def ddp_weights(device):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    ddp = DDP(model, device_ids=[0] if device.type == "cuda" else None, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(5):
        x, y = torch.randn(16, 32, generator=gen).to(device), torch.randn(16, 8, generator=gen).to(device)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def main():
    torch.cuda.set_device(0)
    dist.init_process_group("gradsync")
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)
    collectives(dev, r, n)
    on_gpu, on_cpu = ddp_weights(dev), ddp_weights(torch.device("cpu"))
    for a, b in zip(on_gpu, on_cpu):
        close(a, b, "DDP weights, CUDA against CPU")
    mine = torch.cat([p.view(-1) for p in on_gpu]).to(dev)
    everyone = [torch.zeros_like(mine) for _ in range(n)]
    dist.all_gather(everyone, mine)
    assert all(torch.equal(e, everyone[0]) for e in everyone), "DDP weights differ between ranks"
    dist.destroy_process_group()
    print("rank %d: c10d CUDA check passed (%s)" % (r, os.environ.get("GRADSYNC_SOCKET")))


if __name__ == "__main__":
    main()
