# SPDX-License-Identifier: Apache-2.0
"""Gradients of the collectives (Horovod's rules), checked numerically."""
import torch

import gradsync.torch as hvd


def test_allreduce_gradient(rank, size):
    x = torch.full((5,), float(rank + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum)
    (y * (rank + 1)).sum().backward()
    # d/dx_r of sum_k w_k * sum_j x_j = sum_k w_k, gathered by the backward allreduce.
    assert torch.allclose(x.grad, torch.full((5,), float(size * (size + 1) / 2)))


def test_average_allreduce_gradient(size):
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x).sum().backward()
    assert torch.allclose(x.grad, torch.ones(3))


def test_grouped_allreduce_gradient(size):
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    (ra.sum() + 2 * rb.sum()).backward()
    assert torch.allclose(a.grad, torch.full((2,), float(size)))
    assert torch.allclose(b.grad, torch.full((3,), 2.0 * size))


def test_allgather_gradient(rank, size):
    x = torch.full((rank + 1, 2), 1.0, requires_grad=True)
    gathered = hvd.allgather(x)
    weights = torch.arange(gathered.shape[0], dtype=torch.float32).unsqueeze(1)
    (gathered * weights).sum().backward()
    # Every rank applies the same weights; Horovod's rule averages them: row i gets i.
    begin = sum(r + 1 for r in range(rank))
    expected = torch.arange(begin, begin + rank + 1, dtype=torch.float32).unsqueeze(1).expand(-1, 2)
    assert torch.allclose(x.grad, expected)


def test_broadcast_gradient(rank, size):
    x = torch.ones(4, requires_grad=True)
    hvd.broadcast(x, root_rank=0).sum().backward()
    assert torch.allclose(x.grad, torch.ones(4) if rank == 0 else torch.zeros(4))


def test_alltoall_gradient(rank, size):
    x = torch.ones(size, 3, requires_grad=True)
    out = hvd.alltoall(x)
    (out * (rank + 1)).sum().backward()
    # Row i went to rank i, whose weight is i + 1.
    assert torch.allclose(x.grad, torch.arange(1, size + 1, dtype=torch.float32).unsqueeze(1).expand(-1, 3))


def test_reducescatter_gradient(rank, size):
    x = torch.ones(size * 2, 2, requires_grad=True)
    out = hvd.reducescatter(x, op=hvd.Sum)
    (out * (rank + 1)).sum().backward()
    # Horovod's rule for Sum: the gathered gradient times the set size.
    expected = size * torch.cat([torch.full((2, 2), float(r + 1)) for r in range(size)])
    assert torch.allclose(x.grad, expected)
