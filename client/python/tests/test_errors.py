# SPDX-License-Identifier: Apache-2.0
"""Mismatches raise GradsyncError with the daemon's explanation on every
rank, and the job goes on."""
import pytest
import torch

import gradsync.torch as hvd


def test_shape_mismatch(rank):
    with pytest.raises(hvd.GradsyncError, match=r"err\.shape.*shape"):
        hvd.allreduce(torch.ones(rank + 1), name="err.shape")
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.shape").tolist() == [hvd.size()] * 2


def test_dtype_mismatch(rank):
    dtype = torch.float32 if rank == 0 else torch.float64
    with pytest.raises(hvd.GradsyncError, match=r"err\.dtype.*dtype.*float32.*float64"):
        hvd.allreduce(torch.ones(3, dtype=dtype), name="err.dtype")


def test_broadcast_root_mismatch(rank):
    with pytest.raises(hvd.GradsyncError, match=r"err\.root.*root"):
        hvd.broadcast(torch.ones(3), root_rank=rank, name="err.root")


def test_duplicate_name_in_flight(rank, size):
    # Rank 0 submits 'err.dup' twice while the others wait at a barrier, so
    # the first is surely still in flight.
    if rank == 0:
        first = hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum)
        with pytest.raises(hvd.GradsyncError, match=r"err\.dup"):
            hvd.synchronize(hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum))
    hvd.barrier()
    if rank != 0:
        first = hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum)
    assert hvd.synchronize(first).tolist() == [size] * 3


def test_alltoall_bad_splits(size):
    with pytest.raises(hvd.GradsyncError, match="split"):
        hvd.alltoall(torch.ones(4), splits=[5] * size, name="err.splits")


def test_unsupported_inputs_refused_before_the_daemon():
    with pytest.raises(hvd.GradsyncError, match="dtype"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)


def test_a_failed_group_raises_its_error_and_releases_its_members(rank, size):
    # The first member fails at once on every rank (bool cannot be summed);
    # the other is left waiting for a group that never completes. The error
    # is raised at once and nothing complains about handles still in flight
    # (issue 9: "operation 'gr0.1' is still in flight").
    bad = torch.ones(4, dtype=torch.bool)
    with pytest.raises(hvd.GradsyncError, match="not allowed on bool"):
        hvd.grouped_allreduce([bad, torch.ones(4)], op=hvd.Sum, name="gr.broken")
    from gradsync.torch import _context
    assert len(_context.current().orphans) <= 1
    hvd.barrier()
