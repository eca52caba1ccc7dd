# SPDX-License-Identifier: Apache-2.0
"""Mismatches raise GradsyncError with the daemon's explanation on every
rank, errors in a rank's own arguments raise at the call (Horovod's types),
and the job goes on."""
import time

import pytest
import torch

import gradsync.torch as hvd
from conftest import EVEN_RANKS


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
    # the first is surely still in flight: ValueError at the call, as Horovod.
    if rank == 0:
        first = hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum)
        with pytest.raises(ValueError, match=r"same name as another tensor.*err\.dup"):
            hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum)
    hvd.barrier()
    if rank != 0:
        first = hvd.allreduce_async(torch.ones(3), name="err.dup", op=hvd.Sum)
    assert hvd.synchronize(first).tolist() == [size] * 3


def test_a_name_is_free_again_once_its_collective_ran_unsynchronized(rank, size):
    # Horovod frees a name when its collective has run; the handle may never
    # be synchronized. Later collectives of that name then work.
    first = hvd.allreduce_async(torch.ones(3), name="err.unsynced", op=hvd.Sum)
    while not hvd.poll(first):
        time.sleep(0.001)
    again = hvd.allreduce_async(torch.full((3,), 2.0), name="err.unsynced", op=hvd.Sum)
    assert hvd.synchronize(again).tolist() == [2.0 * size] * 3
    assert hvd.allreduce(torch.ones(2), name="err.unsynced", op=hvd.Sum).tolist() == [size] * 2
    # The first handle still gives its result.
    assert hvd.synchronize(first).tolist() == [size] * 3


@pytest.mark.parametrize("splits, match", [
    ([5, 5, 5], "splits sum to"), ([-1, 5, 0], "must not be negative"), ([4], "splits for a process set"),
    ([1.0, 3.0, 0.0], "must be integers"), (torch.tensor([1.5, 2.5, 0.0]), "must be integers"),
], ids=["sum", "negative", "length", "floats", "float-tensor"])
def test_alltoall_bad_splits_raise_at_the_call(size, splits, match):
    values = splits[:size] if not isinstance(splits, torch.Tensor) else splits[:size]
    if match == "splits for a process set":
        values = [4] + [0] * size  # one too many
    with pytest.raises(ValueError, match=match):
        hvd.alltoall(torch.ones(4), splits=values)
    hvd.barrier()


def test_unsupported_inputs_raise_at_the_call():
    with pytest.raises(ValueError, match="tensor type"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="bool tensor reduces only with Min or Max"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum)
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        hvd.allreduce([1.0, 2.0])
    hvd.barrier()


def test_a_process_set_without_this_rank_raises_value_error(rank):
    if rank in EVEN_RANKS.ranks:
        assert hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=EVEN_RANKS).tolist() == [len(EVEN_RANKS.ranks)] * 2
    else:
        with pytest.raises(ValueError, match="not a member of process set"):
            hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=EVEN_RANKS)


def test_an_even_alltoall_of_rows_the_set_does_not_divide_raises_at_the_call(rank, size):
    with pytest.raises(ValueError, match="first dimension %d is not a multiple of the process set's %d ranks"
                       % (size + 1, size)):
        hvd.alltoall(torch.ones(size + 1), name="err.uneven")
    # Every rank raised; none waits for the others: the job goes on.
    assert hvd.alltoall(torch.full((size,), float(rank)), name="err.even").tolist() == list(map(float, range(size)))


def test_a_local_error_on_one_rank_fails_the_others_at_once_and_later_unnamed_calls_run(rank, size):
    # The last rank passes splits that do not sum to its first dimension: it
    # raises at the call; the others' same (unnamed) alltoall fails at once
    # naming it, not at the stall deadline (30 s here); then unnamed
    # collectives of every kind pair up again on every rank.
    bad = rank == size - 1
    splits = [4] + [0] * (size - 1)
    started = time.monotonic()
    if bad:
        with pytest.raises(ValueError, match="splits sum to 5"):
            hvd.alltoall(torch.ones(4), splits=[5] + [0] * (size - 1))
    else:
        with pytest.raises(hvd.GradsyncError, match=r"rank %d failed its alltoall at the call: ValueError" % (size - 1)):
            hvd.alltoall(torch.ones(4), splits=splits)
    assert time.monotonic() - started < 10
    for step in range(3):
        assert hvd.allreduce(torch.full((3,), float(rank)), op=hvd.Sum).tolist() == [size * (size - 1) / 2] * 3
        assert hvd.broadcast(torch.tensor([rank + step]), root_rank=0).tolist() == [step]
        assert hvd.allgather(torch.tensor([rank])).tolist() == list(range(size))


def test_a_local_error_in_a_group_fails_the_whole_group_everywhere(rank, size):
    # Rank 0's second member is a bool tensor with Sum: ValueError at the
    # call; on the other ranks the group fails naming rank 0; the job goes on
    # and nothing complains about handles still in flight.
    second = torch.ones(4, dtype=torch.bool) if rank == 0 else torch.ones(4)
    if rank == 0:
        with pytest.raises(ValueError, match="bool tensor"):
            hvd.grouped_allreduce([torch.ones(4), second], op=hvd.Sum, name="gr.broken")
    else:
        with pytest.raises(hvd.GradsyncError, match="rank 0 failed its allreduce at the call"):
            hvd.grouped_allreduce([torch.ones(4), second], op=hvd.Sum, name="gr.broken")
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [size] * 2


def test_named_groups_match_by_name_whatever_the_submission_order(rank, size):
    # Hooks may fire in another order on each rank: odd ranks submit the
    # groups in the opposite order, and a third plain op in between.
    groups = {"ga": [torch.full((3,), 1.0), torch.full((2,), 2.0)], "gb": [torch.full((5,), 3.0)]}
    order = ["ga", "gb"] if rank % 2 == 0 else ["gb", "ga"]
    handles = {}
    for group in order:
        handles[group] = hvd.grouped_allreduce_async(groups[group], op=hvd.Sum, name="order." + group)
    plain = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="order.plain")
    results = {group: hvd.synchronize(handles[group]) for group in ("gb", "ga")}
    assert [t.tolist() for t in results["ga"]] == [[size * 1.0] * 3, [size * 2.0] * 2]
    assert results["gb"][0].tolist() == [size * 3.0] * 5
    assert hvd.synchronize(plain).tolist() == [size]
