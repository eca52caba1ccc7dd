# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer on a CUDA model: N ranks with batch b give the same
weights as one process with batch N*b."""
import pytest
import torch

import gradsync.torch as hvd


def make_model(seed, device):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    return model.to(device)


def global_batch(step, size, per_rank, device):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size * per_rank, 8, generator=g)
    return x.to(device), x.sum(1, keepdim=True).sin().to(device)


def train(model, optimizer, steps, size, rank, per_rank, shard, device):
    for step in range(steps):
        x, y = global_batch(step, size, per_rank, device)
        if shard:
            x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=0.01)], ids=["sgd", "adam"])
def test_data_parallel_equals_big_batch(rank, size, device, make_optimizer):
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = make_model(1, device)
    train(reference, make_optimizer(reference.parameters()), 5, size, rank, 4, False, device)
    model = make_model(100 + rank, device)
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters())
    if rank == 0:
        model.load_state_dict(make_model(1, device).state_dict())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    train(model, optimizer, 5, size, rank, 4, True, device)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: "%s: %s" % (name, m))
