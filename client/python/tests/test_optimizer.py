# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer: N ranks with batch b equal one process with batch N*b."""
import pytest
import torch

import gradsync.torch as hvd
from conftest import EVEN_RANKS


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def global_batch(step, size, per_rank):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size * per_rank, 8, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def train(model, optimizer, steps, size, rank, per_rank, shard):
    for step in range(steps):
        x, y = global_batch(step, size, per_rank)
        if shard:
            x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


@pytest.mark.parametrize("zero_copy", [False, True], ids=["copy", "zero_copy"])
@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=0.01)], ids=["sgd", "adam"])
def test_data_parallel_equals_big_batch(rank, size, zero_copy, make_optimizer):
    reference = make_model(seed=1)
    train(reference, make_optimizer(reference.parameters()), 5, size, rank, 4, shard=False)
    model = make_model(seed=100 + rank)  # different on purpose: broadcast fixes it
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters(), zero_copy_gradients=zero_copy)
    hvd.broadcast_parameters(make_model(seed=1).state_dict() if rank == 0 else model.state_dict(), root_rank=0)
    if rank == 0:
        model.load_state_dict(make_model(seed=1).state_dict())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    train(model, optimizer, 5, size, rank, 4, shard=True)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: "%s: %s" % (name, m))


def test_broadcast_optimizer_state(rank, size):
    model = make_model(seed=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001 * (rank + 1))
    if rank == 0:
        model(torch.ones(2, 8)).sum().backward()
        optimizer.step()
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.001)
    state = optimizer.state_dict()["state"]
    assert len(state) == 4 and all(int(s["step"]) == 1 for s in state.values())
    exp_avg = hvd.allgather(state[0]["exp_avg"].unsqueeze(0))
    assert torch.equal(exp_avg[0], exp_avg[-1])


def test_backward_passes_per_step_and_skip_synchronize(rank, size):
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         named_parameters=model.named_parameters(), backward_passes_per_step=2,
                                         op=hvd.Sum)
    for _ in range(2):
        (model(torch.full((1, 2), float(rank + 1)))).sum().backward()
    optimizer.synchronize()
    with optimizer.skip_synchronize():
        optimizer.step()
    # Gradient per pass on rank r: r + 1; two passes, summed over ranks.
    expected = -2.0 * sum(r + 1 for r in range(size))
    assert torch.allclose(model.weight, torch.full((1, 2), expected))


def test_groups_and_fp16_compression(rank, size):
    model = make_model(seed=3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), groups=2,
                                         compression=hvd.Compression.fp16)
    x = torch.full((2, 8), float(rank))
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.synchronize()
    grads = [p.grad.clone() for p in model.parameters()]
    for g in grads:
        gathered = hvd.allgather(g.unsqueeze(0))
        assert torch.allclose(gathered[0], gathered[-1])
    with optimizer.skip_synchronize():
        optimizer.step()


def test_zero_grad_between_backward_and_step_is_refused(rank):
    model = torch.nn.Linear(2, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        optimizer.zero_grad()
    optimizer.step()


def test_duplicate_parameter_names_refused():
    model = torch.nn.Linear(2, 1)
    named = [("w", model.weight), ("w", model.bias)]
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=named)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_sparse_allreduce_gathers_indices_and_values(rank, size, op):
    # Rank r holds rows r and r+1 of a 5 x 2 matrix, valued r + 1.
    rows = torch.tensor([[rank, rank + 1]])
    sparse = torch.sparse_coo_tensor(rows, torch.full((2, 2), float(rank + 1)), (size + 1, 2))
    result = hvd.synchronize(hvd.sparse_allreduce_async(sparse, name="sparse.m", op=op))
    assert result.is_sparse
    expected = sum(torch.sparse_coo_tensor(torch.tensor([[r, r + 1]]), torch.full((2, 2), float(r + 1)),
                                           (size + 1, 2)).to_dense() for r in range(size))
    if op == hvd.Average:
        expected = expected / size
    assert torch.allclose(result.to_dense(), expected)


class EmbeddingBag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 4, sparse=True)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, ids):
        return self.head(self.embedding(ids).mean(1))


def sparse_batch(step, size, per_rank):
    g = torch.Generator().manual_seed(2000 + step)
    ids = torch.randint(0, 50, (size * per_rank, 3), generator=g)
    return ids, ids.float().mean(1, keepdim=True).div(50)


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["sparse", "as_dense"])
def test_sparse_embedding_trains_to_the_weights_of_one_process(rank, size, sparse_as_dense):
    # sparse_as_dense=False (the default): the embedding's sparse gradients
    # travel as allgathered indices and values; True: a dense copy is
    # reduced, and the optimizer gets a sparse gradient back (as Horovod).
    # N ranks with 4 samples each end where one process with 4N samples does.
    torch.manual_seed(3)
    reference = EmbeddingBag()
    torch.manual_seed(300 + rank)
    model = EmbeddingBag()
    make = lambda params: torch.optim.SGD(params, lr=0.5)  # noqa: E731 (SGD takes sparse gradients)
    optimizer = hvd.DistributedOptimizer(make(model.parameters()), named_parameters=model.named_parameters(),
                                         sparse_as_dense=sparse_as_dense)
    ref_optimizer = make(reference.parameters())
    hvd.broadcast_parameters(reference.state_dict() if rank == 0 else model.state_dict(), root_rank=0)
    if rank == 0:
        model.load_state_dict(reference.state_dict())
    for step in range(6):
        ids, y = sparse_batch(step, size, 4)
        ref_optimizer.zero_grad()
        torch.nn.functional.mse_loss(reference(ids), y).backward()
        ref_optimizer.step()
        optimizer.zero_grad()
        mine = slice(rank * 4, (rank + 1) * 4)
        torch.nn.functional.mse_loss(model(ids[mine]), y[mine]).backward()
        assert model.embedding.weight.grad.is_sparse
        optimizer.step()
        assert model.embedding.weight.grad.is_sparse
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6), (p - q).abs().max()


def test_sparse_adam_takes_the_gradients_sparse_as_dense_reduces(rank):
    # SparseAdam refuses dense gradients: sparse_as_dense hands it sparse ones.
    torch.manual_seed(5)
    embedding = torch.nn.Embedding(20, 3, sparse=True)
    optimizer = hvd.DistributedOptimizer(torch.optim.SparseAdam(embedding.parameters(), lr=0.1),
                                         named_parameters=embedding.named_parameters(), sparse_as_dense=True)
    for step in range(3):
        optimizer.zero_grad()
        embedding(torch.tensor([[rank + step, 7]])).sum().backward()
        optimizer.step()
    weights = hvd.allgather_object(embedding.weight.detach().clone())
    assert all(torch.equal(weights[0], w) for w in weights)


def _optimizers():
    """Every optimizer of torch.optim that takes dense gradients (LBFGS
    cannot be broadcast, as in Horovod; SparseAdam is tested apart)."""
    names = ["SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"]
    return [getattr(torch.optim, n) for n in names if hasattr(torch.optim, n)]


def _states_equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_states_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_states_equal(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("optimizer_class", _optimizers(), ids=lambda c: c.__name__)
def test_broadcast_optimizer_state_of_every_optimizer(rank, optimizer_class):
    # Each rank steps on its own data (different states, and a different
    # learning rate), then takes rank 0's state: hyper-parameters and
    # per-parameter buffers equal everywhere.
    torch.manual_seed(rank)
    model = torch.nn.Linear(4, 2)
    optimizer = optimizer_class(model.parameters(), lr=0.01 * (rank + 1))
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(3, 4)).pow(2).sum().backward()
        optimizer.step()
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    states = hvd.allgather_object(optimizer.state_dict())
    assert all(_states_equal(states[0], s) for s in states), optimizer_class.__name__
    assert optimizer.param_groups[0]["lr"] == 0.01


def test_broadcast_from_a_root_without_gradients_yet(rank, size):
    # Rank 0's optimizer never stepped (its parameters have no gradient, no
    # state): as Horovod, it makes its state first (zero gradients, one
    # step); the others, which stepped, take that state, and the parameters
    # (one frozen, without gradient) become rank 0's.
    torch.manual_seed(10 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    model[0].bias.requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.1)
    if rank != 0:
        model(torch.ones(2, 3)).sum().backward()
        optimizer.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    states = hvd.allgather_object(optimizer.state_dict())
    assert all(_states_equal(states[0], s) for s in states)
    assert [float(s["step"]) for s in optimizer.state_dict()["state"].values()] == [1.0] * 3
    weights = hvd.allgather_object([p.detach().clone() for p in model.state_dict().values()])
    assert all(_states_equal(weights[0], w) for w in weights)


def test_lbfgs_state_cannot_be_broadcast():
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="cannot broadcast torch.optim.LBFGS state"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


def test_horovods_warnings(rank):
    model = torch.nn.Linear(2, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.synchronize()
    with pytest.warns(UserWarning, match=r"optimizer.step\(\) called without optimizer.skip_synchronize\(\) "
                                         r"context after optimizer.synchronize\(\)"):
        optimizer.step()
    with pytest.warns(DeprecationWarning, match="`num_groups` has been replaced by `groups`"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), num_groups=1)


def test_a_rank_outside_the_optimizers_process_set_steps_with_its_own_gradients(rank):
    # As Horovod: no hooks there, synchronize() returns at once, step()
    # applies the local gradient; the set's ranks average theirs.
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         named_parameters=model.named_parameters(), process_set=EVEN_RANKS)
    for _ in range(2):
        optimizer.zero_grad()
        (model(torch.ones(1, 1)) * (rank + 1)).sum().backward()
        optimizer.step()
    if EVEN_RANKS.included():
        expected = -2.0 * sum(r + 1 for r in EVEN_RANKS.ranks) / len(EVEN_RANKS.ranks)
    else:
        expected = -2.0 * (rank + 1)
    assert model.weight.item() == pytest.approx(expected)
    hvd.barrier()


@pytest.mark.parametrize("distributed", [False, True], ids=["plain", "distributed"])
def test_broadcasting_a_new_optimizers_state_makes_the_state_first(rank, distributed):
    # As Horovod: an optimizer without state yet gets zero gradients and one
    # local step, so its state (Adam's moments) exists and is broadcast.
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    if distributed:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for p in model.parameters():
        assert p.grad is not None and not p.grad.any()
        state = optimizer.state[p]
        assert set(state) >= {"step", "exp_avg", "exp_avg_sq"}
        assert float(state["step"]) == 1.0
    hvd.barrier()
