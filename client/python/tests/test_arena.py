# SPDX-License-Identifier: Apache-2.0
"""Tensors in the shared arena: DistributedOptimizer's gradients (by
default), gradsync.torch.arena's tensors, and what happens to both when the
optimizer or the client goes away."""
import gc
import os
import subprocess
import sys

import pytest
import torch

import gradsync.torch as hvd


def small_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def live_blocks():
    gc.collect()  # blocks of earlier tests' garbage go back first
    return hvd.arena.live_blocks()


def summed_gradients(size):
    """The gradients every rank's small_model() gets for input rank + 1, summed."""
    model = small_model()
    for r in range(size):
        model(torch.full((2, 8), float(r + 1))).sum().backward()
    return [p.grad for p in model.parameters()]


def test_gradients_are_reduced_in_the_arena_by_default_and_leave_it_with_the_optimizer(rank, size):
    model = small_model()
    before = live_blocks()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters(), op=hvd.Sum)
    count, nbytes = live_blocks()
    assert count == before[0] + 1
    assert nbytes >= before[1] + sum(p.numel() * p.element_size() for p in model.parameters())
    views = [optimizer._arena.views[p].data_ptr() for p in model.parameters()]
    for _ in range(2):  # the first gradient is copied in; autograd accumulates in the arena from then on
        optimizer.zero_grad()
        model(torch.full((2, 8), float(rank + 1))).sum().backward()
        optimizer.synchronize()
        assert [p.grad.data_ptr() for p in model.parameters()] == views
        for p, want in zip(model.parameters(), summed_gradients(size)):
            torch.testing.assert_close(p.grad, want)
        with optimizer.skip_synchronize():
            optimizer.step()
    summed = [p.grad.clone() for p in model.parameters()]
    del optimizer
    assert live_blocks() == before  # the block went back to the arena
    for p, s, address in zip(model.parameters(), summed, views):
        assert p.grad.data_ptr() != address and torch.equal(p.grad, s)  # private copies, same values


def test_gradients_too_large_for_the_arena_are_copied_with_a_warning(rank, size):
    arena_bytes = hvd.arena._context.current().client.arena_bytes
    big = torch.nn.Parameter(torch.zeros(arena_bytes // 8 + 16))
    before = live_blocks()
    with pytest.warns(UserWarning, match="copied instead"):
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD([big], lr=0.1), named_parameters=[("big", big)])
    assert live_blocks() == before
    del optimizer


def test_arena_tensors_reduce_in_place_and_give_their_block_back_with_their_last_view(rank, size):
    before = live_blocks()
    t = hvd.arena.zeros(3, 5)
    assert t.shape == (3, 5) and t.dtype == torch.float32 and torch.count_nonzero(t) == 0
    t.add_(rank + 1)
    address = t.data_ptr()
    hvd.allreduce_(t, op=hvd.Sum, name="arena.inplace")
    assert t.data_ptr() == address
    assert torch.equal(t, torch.full((3, 5), float(sum(r + 1 for r in range(size)))))
    row = t[1]
    del t
    assert live_blocks()[0] == before[0] + 1  # the view keeps the block
    del row
    assert live_blocks() == before
    copy = hvd.arena.copy_of(torch.arange(6, dtype=torch.int64).view(2, 3))
    assert copy.dtype == torch.int64 and torch.equal(copy, torch.arange(6).view(2, 3))
    assert hvd.arena.empty((4,), dtype=torch.float16).shape == (4,)


_AFTER_SHUTDOWN = """
import torch
import gradsync.torch as hvd
hvd.init()
model = torch.nn.Linear(4, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
model(torch.ones(1, 4)).sum().backward()
optimizer.step()
kept = hvd.arena.copy_of(torch.arange(6.0))
hvd.shutdown()
assert torch.equal(model.weight.grad, torch.ones(2, 4)), model.weight.grad
assert torch.equal(kept, torch.arange(6.0)), kept
kept.add_(1)  # still writable memory
print("values kept after shutdown")
"""


def test_shutdown_moves_gradients_out_and_keeps_other_arena_tensors_alive(rank, size):
    # A one-rank job of its own on the same daemon: this suite's client stays up.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GRADSYNC_LEADER", "GRADSYNC_ELASTIC", "HOROVOD_ELASTIC"))}
    env.update(GRADSYNC_JOB_ID="%s-arena-shutdown-%d" % (os.environ["GRADSYNC_JOB_ID"], rank), GRADSYNC_RANK="0",
               GRADSYNC_SIZE="1", GRADSYNC_LOCAL_RANK="0", GRADSYNC_LOCAL_SIZE="1", GRADSYNC_CROSS_RANK="0",
               GRADSYNC_CROSS_SIZE="1", GRADSYNC_ARENA_BYTES=str(16 << 20))
    done = subprocess.run([sys.executable, "-c", _AFTER_SHUTDOWN], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "values kept after shutdown" in done.stdout
    assert "1 tensors of the shared arena" in done.stderr  # `kept`, not the gradients
