# SPDX-License-Identifier: Apache-2.0
"""Adasum (op=hvd.Adasum) against a direct float64 reference: the ranks'
tensors combined pairwise in a binary tree of rank order, each pair (a, b)
into (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b. Power-of-two sizes only,
as in Horovod (the 3-rank run checks the error)."""
import pytest
import torch

import gradsync.torch as hvd


def reference(tensors):
    vs = [t.to(torch.float64).flatten() for t in tensors]
    level = 1
    while level < len(vs):
        for r in range(0, len(vs), 2 * level):
            a, b = vs[r], vs[r + level]
            dot, aa, bb = a.dot(b), a.dot(a), b.dot(b)
            vs[r] = (1 - dot / (2 * aa)) * a + (1 - dot / (2 * bb)) * b
        level *= 2
    return vs[0].reshape(tensors[0].shape)


def power_of_two(size):
    return size & (size - 1) == 0


def inputs(rank, shape, dtype):
    g = torch.Generator().manual_seed(77 + rank)
    return torch.randn(shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-6), (torch.float16, 2e-3)],
                         ids=["float64", "float32", "float16"])
def test_adasum_allreduce_matches_the_reference(rank, size, dtype, tolerance):
    x = inputs(rank, (7, 5), dtype)
    if not power_of_two(size):
        with pytest.raises(NotImplementedError, match="non-power of 2 ranks"):
            hvd.allreduce(x, op=hvd.Adasum)
        return
    result = hvd.allreduce(x, op=hvd.Adasum, name="adasum.x")
    expected = reference([inputs(r, (7, 5), dtype) for r in range(size)])
    assert result.dtype == dtype
    assert torch.allclose(result.to(torch.float64), expected, rtol=tolerance, atol=tolerance)
    # Scale-equivariant: prescale 2 and postscale 0.25 halve the result.
    scaled = hvd.allreduce(x, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25, name="adasum.scaled")
    assert torch.allclose(scaled.to(torch.float64), expected * 0.5, rtol=tolerance, atol=tolerance)


def test_adasum_refuses_integer_tensors_at_the_call(size):
    if not power_of_two(size):
        return
    with pytest.raises(ValueError, match="Adasum needs a floating-point tensor"):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
    hvd.barrier()


def test_adasum_optimizer_adds_the_combined_local_steps(rank, size):
    # Horovod's Adasum optimizer: the local SGD step's delta (-lr * g_r) is
    # combined with Adasum and added to the starting weights.
    if not power_of_two(size):
        return
    torch.manual_seed(5)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), op=hvd.Adasum)
    x = torch.full((4, 3), float(rank + 1)) * torch.arange(1, 4.)
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    optimizer.step()
    everyone = hvd.allgather_object(grads)
    for i, p in enumerate(model.parameters()):
        deltas = [-0.1 * g[i] for g in everyone]
        assert torch.allclose(p.detach().to(torch.float64), start[i].to(torch.float64) + reference(deltas),
                              rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError, match="Skipping synchronization is not supported"):
        with optimizer.skip_synchronize():
            pass
