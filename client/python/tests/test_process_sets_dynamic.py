# SPDX-License-Identifier: Apache-2.0
"""Process sets added and removed at run time (Horovod's add_process_set /
remove_process_set, without HOROVOD_DYNAMIC_PROCESS_SETS)."""
import pytest
import torch

import gradsync.torch as hvd
from gradsync.errors import GradsyncError

STATIC_SETS = 2  # conftest's EVEN_RANKS and FIRST_TWO


def _others(size):
    return list(range(1, size))  # no static set has exactly these ranks


def test_every_op_runs_on_an_added_set_and_a_removed_set_is_gone(rank, size):
    ps = hvd.add_process_set(_others(size))
    assert ps.process_set_id > STATIC_SETS
    assert ps.ranks == _others(size) and ps.size() == size - 1
    assert ps.included() == (rank != 0) and ps.rank() == rank - 1
    if ps.included():
        members = torch.tensor([float(r) for r in ps.ranks])
        assert hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, process_set=ps).item() == members.sum().item()
        assert hvd.allgather(torch.tensor([rank]), process_set=ps).tolist() == ps.ranks
        assert hvd.broadcast(torch.tensor([rank]), root_rank=ps.ranks[-1], process_set=ps).item() == ps.ranks[-1]
        rows = torch.arange(ps.size(), dtype=torch.float32) + 10 * rank
        assert hvd.alltoall(rows, process_set=ps).tolist() == [10.0 * r + ps.rank() for r in ps.ranks]
        scattered = hvd.reducescatter(torch.ones(ps.size(), 2), op=hvd.Sum, process_set=ps)
        assert scattered.tolist() == [[float(ps.size())] * 2]
        grouped = hvd.grouped_allreduce([torch.ones(3), torch.full((2,), float(rank))], op=hvd.Sum, process_set=ps)
        assert grouped[0].tolist() == [float(ps.size())] * 3 and grouped[1].tolist() == [members.sum().item()] * 2
        assert hvd.broadcast_object({"from": rank}, root_rank=ps.ranks[0], process_set=ps) == {"from": ps.ranks[0]}
        assert hvd.allgather_object(rank, process_set=ps) == ps.ranks
        hvd.barrier(process_set=ps)
        # A DistributedOptimizer over the set averages its members' gradients.
        model = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            model.weight.fill_(1.0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters(), process_set=ps)
        model(torch.full((1, 2), float(rank))).sum().backward()
        opt.step()
        mean = members.mean().item()
        assert model.weight.detach().tolist() == [[1.0 - mean, 1.0 - mean]]
    # The global set still works beside it.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size

    old_id = ps.process_set_id
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None
    with pytest.raises(ValueError, match="unknown"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert hvd.remove_process_set(ps) is False  # already removed
    assert hvd.remove_process_set(hvd.global_process_set) is False
    again = hvd.add_process_set(hvd.ProcessSet(_others(size)))
    assert again.process_set_id > old_id  # ids are never reused
    assert hvd.remove_process_set(again)


def test_a_duplicate_set_raises_value_error_on_every_rank(size):
    with pytest.raises(ValueError, match="exists already: id 0"):
        hvd.add_process_set(list(range(size)))  # the global set's ranks
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size  # nothing stalls afterwards


def test_one_ranks_bad_call_fails_the_others_at_once(rank, size):
    if rank == 0:
        with pytest.raises(ValueError, match="outside"):
            hvd.add_process_set([0, size])
    else:
        with pytest.raises(GradsyncError, match="rank 0 failed its process set add at the call"):
            hvd.add_process_set([size - 1])  # valid here
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size  # still in step
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size


def test_removing_a_set_fails_its_work_in_flight(rank, size):
    if size < 3:
        pytest.skip("needs a set of two ranks other than the global one")
    ps = hvd.add_process_set([1, 2])
    handle = None
    if rank == 1:  # rank 2 never submits it
        handle = hvd.allreduce_async(torch.ones(2), name="doomed", process_set=ps)
    assert hvd.remove_process_set(ps)
    if handle is not None:
        with pytest.raises(GradsyncError, match=r"process set \d+ \[1, 2\] was removed .* waited for ranks \[2\]"):
            hvd.synchronize(handle)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == size


def test_barriers_of_a_set_keep_global_barriers_in_step(rank, size):
    import time
    from conftest import EVEN_RANKS
    members = EVEN_RANKS.ranks
    if EVEN_RANKS.included():  # ranks outside the set skip it
        start = time.monotonic()
        if len(members) > 1 and rank == members[-1]:
            time.sleep(0.5)
        hvd.barrier(process_set=EVEN_RANKS)
        if len(members) > 1:  # no member passes it before the last one came
            assert time.monotonic() - start >= 0.45
    hvd.barrier()
    hvd.barrier()
    # The collectives after the barriers still pair up rank by rank.
    assert hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum).item() == sum(range(size))
