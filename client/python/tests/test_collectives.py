# SPDX-License-Identifier: Apache-2.0
"""Every collective against a reference computed from every rank's input."""
import pytest
import torch

import gradsync.torch as hvd
from conftest import EVEN_RANKS, FIRST_TWO
from reference import NUMERIC, OPS, close, contribution

ALL_DTYPES = NUMERIC + [torch.bool]


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Product], ids=["sum", "min", "max", "product"])
def test_allreduce_each_dtype_and_op(rank, size, dtype, op):
    shape = (3, 17)
    result = hvd.allreduce(contribution(rank, shape, dtype), op=op)
    expected = OPS[op]([contribution(r, shape, torch.float64) for r in range(size)])
    close(result, expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32], ids=str)
def test_allreduce_average_is_default(rank, size, dtype):
    result = hvd.allreduce(contribution(rank, (64,), dtype))
    total = sum(contribution(r, (64,), torch.float64) for r in range(size))
    expected = total / size if dtype.is_floating_point else torch.div(total, size, rounding_mode="trunc")
    close(result, expected, dtype)


def test_allreduce_scaling_in_place_and_async(rank, size):
    x = torch.full((1000,), float(rank + 1))
    handle = hvd.allreduce_async_(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name="scaled")
    assert hvd.synchronize(handle) is x
    assert torch.allclose(x, torch.full((1000,), float(size * (size + 1) / 2)))
    y = torch.ones(10)
    h = hvd.allreduce_async(y, op=hvd.Sum)
    while not hvd.poll(h):
        pass
    assert torch.equal(hvd.synchronize(h), torch.full((10,), float(size)))
    assert torch.equal(y, torch.ones(10)), "allreduce_async must not modify its input"
    z = torch.ones(2, 3).t()  # not contiguous
    hvd.allreduce_(z, op=hvd.Sum)
    assert torch.equal(z, torch.full((3, 2), float(size)))


def test_average_keyword_still_accepted(size):
    with pytest.warns(DeprecationWarning):
        assert torch.equal(hvd.allreduce(torch.ones(3), average=False), torch.full((3,), float(size)))
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(3), average=True, op=hvd.Sum)


def test_grouped_allreduce(rank, size):
    tensors = [torch.full((n,), float(rank + 1)) for n in (1, 100, 10000)]
    results = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    for n, r in zip((1, 100, 10000), results):
        assert torch.equal(r, torch.full((n,), float(size * (size + 1) / 2)))
    hvd.grouped_allreduce_(tensors, op=hvd.Max)
    assert all(torch.equal(t, torch.full_like(t, float(size))) for t in tensors)


def test_allreduce_on_process_sets(rank, size):
    if EVEN_RANKS.included():
        result = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, process_set=EVEN_RANKS)
        assert result.item() == sum(range(0, size, 2))
    if FIRST_TWO.included():
        result = hvd.allreduce(torch.tensor([rank + 1]), op=hvd.Product, process_set=FIRST_TWO)
        assert result.item() == (2 if size > 1 else 1)
    hvd.barrier()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_allgather_ragged(rank, size, dtype):
    result = hvd.allgather(contribution(rank, (rank + 1, 3), dtype))
    expected = torch.cat([contribution(r, (r + 1, 3), dtype) for r in range(size)])
    assert torch.equal(result, expected)


def test_grouped_allgather_and_process_set(rank, size):
    a, b = hvd.grouped_allgather([torch.tensor([rank]), torch.tensor([[rank, rank]])])
    assert a.tolist() == list(range(size)) and b.shape == (size, 2)
    if EVEN_RANKS.included():
        out = hvd.allgather(torch.tensor([rank]), process_set=EVEN_RANKS)
        assert out.tolist() == list(range(0, size, 2))
    hvd.barrier()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_broadcast(rank, size, dtype):
    root = size - 1
    x = contribution(rank, (4, 5), dtype)
    result = hvd.broadcast(x, root_rank=root)
    assert torch.equal(result, contribution(root, (4, 5), dtype))
    assert torch.equal(x, contribution(rank, (4, 5), dtype))
    hvd.broadcast_(x, root_rank=0)
    assert torch.equal(x, contribution(0, (4, 5), dtype))


def test_alltoall_even_and_with_splits(rank, size):
    x = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    out = hvd.alltoall(x)
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(size)])
    assert torch.equal(out, expected)
    # Rank r sends r + 1 rows of width 2 to every rank.
    splits = [rank + 1] * size
    y = torch.full((sum(splits), 2), float(rank))
    out, received = hvd.alltoall(y, splits=splits)
    assert received.tolist() == [r + 1 for r in range(size)]
    assert torch.equal(out, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]))


def test_reducescatter(rank, size):
    rows = 2 * size + 1  # uneven: the first rank gets one extra row
    x = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + rank
    out = hvd.reducescatter(x, op=hvd.Sum)
    total = sum(torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + r for r in range(size))
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    begin = sum(counts[:rank])
    assert torch.equal(out, total[begin:begin + counts[rank]])
    avg = hvd.reducescatter(x)
    assert torch.allclose(avg, total[begin:begin + counts[rank]] / size)
    a, b = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum)
    assert torch.equal(a, out) and torch.equal(b, out * 2)


def test_join_with_uneven_data(rank, size):
    # Rank r has r + 1 batches; joined ranks no longer contribute.
    for step in range(rank + 1):
        result = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="uneven.%d" % step)
        assert torch.equal(result, torch.full((4,), float(size - step)))
    assert hvd.join() == size - 1


def test_barrier_and_objects(rank, size):
    hvd.barrier()
    assert hvd.broadcast_object({"from": rank, "list": [1, 2]}, root_rank=size - 1) == {"from": size - 1,
                                                                                         "list": [1, 2]}
    assert hvd.allgather_object("r%d" % rank) == ["r%d" % r for r in range(size)]


def test_fp16_compression_round_trip(rank, size):
    x = torch.full((100,), 0.5 + rank, dtype=torch.float32)
    result = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert result.dtype == torch.float32
    assert torch.allclose(result, torch.full((100,), sum(0.5 + r for r in range(size))))
    ints = hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert ints.dtype == torch.int32


def test_deferred_operation_starts_when_its_first_completes(rank, size):
    # The mechanism behind CUDA allgather/alltoall (their output is sized by
    # a CPU exchange first), exercised here with CPU operations.
    from gradsync.torch import _submit
    first = hvd.allgather_async(torch.tensor([rank + 1]), name="deferred.sizes")
    started = []

    def start(counts):
        started.append(int(counts.sum().item()))
        return hvd.allreduce_async(torch.ones(started[0]), op=hvd.Sum, name="deferred.main")

    handle = _submit.defer(first, start)
    while not hvd.poll(handle):
        pass
    assert started == [size * (size + 1) // 2]
    result = hvd.synchronize(handle)
    assert torch.equal(result, torch.full((started[0],), float(size)))
    assert len(started) == 1  # started once
    with pytest.raises(ValueError):
        hvd.synchronize(handle)


def test_deferred_operations_waited_on_in_different_orders(rank, size):
    # Rank-dependent order of synchronize: a wait starts the other deferred
    # operation once its first one is done, so neither rank waits forever.
    from gradsync.torch import _submit

    def deferred(name):
        first = hvd.allgather_async(torch.tensor([1]), name=name + ".sizes")
        return _submit.defer(first, lambda counts: hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name=name))

    handles = {"d.a": deferred("d.a"), "d.b": deferred("d.b")}
    order = ["d.a", "d.b"] if rank % 2 == 0 else ["d.b", "d.a"]
    for name in order:
        assert torch.equal(hvd.synchronize(handles[name]), torch.full((3,), float(size)))


def test_a_deferred_operation_that_cannot_start_reports_why(rank, size):
    from gradsync.torch import _submit
    first = hvd.allgather_async(torch.tensor([1]), name="d.broken.sizes")

    def start(counts):
        raise RuntimeError("cannot start")

    handle = _submit.defer(first, start)
    with pytest.raises(RuntimeError, match="cannot start"):
        while not hvd.poll(handle):
            pass
    with pytest.raises(RuntimeError, match="cannot start"):
        hvd.synchronize(handle)
    with pytest.raises(ValueError):
        hvd.synchronize(handle)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8], ids=str)
def test_integer_scaling_truncates_per_rank_and_after_the_sum_as_horovod(rank, size, dtype):
    # Horovod scales integers in float64 and truncates toward zero: the
    # prescale on each rank's input before the sum, the postscale after it.
    import math
    values = [3 * r + 1 for r in range(size)]
    if dtype == torch.int8:
        values = [-v for v in values]
    x = torch.tensor([values[rank]] * 5, dtype=dtype)
    result = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=0.3)
    expected = math.trunc(sum(math.trunc(v * 0.5) for v in values) * 0.3)
    assert result.tolist() == [expected] * 5


def test_float16_scaling_happens_in_float32(rank, size):
    # Each input widened to float32 and prescaled there, summed and
    # postscaled in float32, rounded to float16 once at the end.
    x = torch.full((4,), 1.0, dtype=torch.float16)
    result = hvd.allreduce(x, op=hvd.Sum, prescale_factor=1.5, postscale_factor=1.0 / 3.0)
    expected = (torch.tensor([1.5 * size], dtype=torch.float32) * torch.tensor(1.0 / 3.0, dtype=torch.float32))
    assert torch.equal(result, expected.to(torch.float16).expand(4))


def test_grouped_reducescatter_with_scaling_equals_separate_calls(rank, size):
    a = torch.arange(2 * size * 3, dtype=torch.float32).reshape(2 * size, 3) + rank
    b = torch.arange(size * 2, dtype=torch.int32).reshape(size, 2) * (rank + 1)
    grouped = hvd.grouped_reducescatter([a, b], op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    separate = [hvd.reducescatter(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0) for t in (a, b)]
    for g, s in zip(grouped, separate):
        assert torch.equal(g, s)
    # And both are right: each rank's 2 rows of 3 x the sum of 0.5 x every
    # rank's tensor (small integers and halves: exact in float32).
    base = torch.arange(2 * size * 3, dtype=torch.float32).reshape(2 * size, 3)
    expected = 3.0 * sum(0.5 * (base + r) for r in range(size))
    assert torch.equal(grouped[0], expected[2 * rank:2 * rank + 2]), (grouped[0], expected)
