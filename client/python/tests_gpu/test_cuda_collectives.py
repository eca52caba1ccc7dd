# SPDX-License-Identifier: Apache-2.0
"""Every supported collective on CUDA tensors against a reference computed on
the CPU from every rank's input."""
import os

import pytest
import torch

import gradsync.torch as hvd
from gradsync.errors import GradsyncError
from reference import NUMERIC, OPS, close, contribution


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Product], ids=["sum", "min", "max", "product"])
def test_allreduce_each_dtype_and_op(rank, size, device, dtype, op):
    shape = (3, 17)
    result = hvd.allreduce(contribution(rank, shape, dtype).to(device), op=op)
    assert result.device == device
    expected = OPS[op]([contribution(r, shape, torch.float64) for r in range(size)])
    close(result, expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max], ids=["sum", "avg", "min", "max"])
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
def test_allreduce_vector_path_and_tail(rank, size, device, dtype, op, misaligned):
    # 16-byte vectors for most elements, scalars for the tail; a view one
    # element in takes the scalar kernel all the way.
    count = 4099
    base = contribution(rank, (count + 1,), dtype).to(device)
    x = base[1:] if misaligned else base[:count]
    result = hvd.allreduce(x, op=op, name="vec.%s.%s.%s" % (dtype, op, misaligned))
    inputs = [contribution(r, (count + 1,), torch.float64)[1:] if misaligned else
              contribution(r, (count + 1,), torch.float64)[:count] for r in range(size)]
    expected = (sum(inputs) / size) if op == hvd.Average else OPS[op](inputs)
    close(result, expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32], ids=str)
def test_allreduce_average(rank, size, device, dtype):
    result = hvd.allreduce(contribution(rank, (64,), dtype).to(device))
    total = sum(contribution(r, (64,), torch.float64) for r in range(size))
    expected = total / size if dtype.is_floating_point else torch.div(total, size, rounding_mode="trunc")
    close(result, expected, dtype)


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max], ids=["and", "or"])
def test_allreduce_bool(rank, size, device, op):
    result = hvd.allreduce(contribution(rank, (33,), torch.bool).to(device), op=op)
    stack = torch.stack([contribution(r, (33,), torch.bool) for r in range(size)])
    expected = stack.all(0) if op == hvd.Min else stack.any(0)
    assert torch.equal(result.cpu(), expected)


def test_scaling_in_place_async_and_poll(rank, size, device):
    x = torch.full((1000,), float(rank + 1), device=device)
    handle = hvd.allreduce_async_(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name="cuda.scaled")
    assert hvd.synchronize(handle) is x
    torch.testing.assert_close(x.cpu(), torch.full((1000,), float(size * (size + 1) / 2)))
    y = torch.ones(10, device=device)
    h = hvd.allreduce_async(y, op=hvd.Sum)
    while not hvd.poll(h):
        pass
    assert torch.equal(hvd.synchronize(h).cpu(), torch.full((10,), float(size)))
    assert torch.equal(y.cpu(), torch.ones(10))
    z = torch.ones(4, 3, device=device).t()  # not contiguous
    hvd.allreduce_(z, op=hvd.Sum)
    assert torch.equal(z.cpu(), torch.full((3, 4), float(size)))


def test_the_result_is_ordered_on_the_current_stream(rank, size, device):
    # Produce the input with a kernel queued just before the enqueue, consume
    # the output right after synchronize: no explicit torch.cuda.synchronize.
    for step in range(20):
        x = torch.full((1 << 20,), float(rank + step), device=device) * 1.0
        hvd.allreduce_(x, op=hvd.Sum, name="cuda.order")
        y = x + 1
        want = sum(float(r + step) for r in range(size)) + 1
        assert float(y[-1].item()) == want


def test_side_stream(rank, size, device):
    stream = torch.cuda.Stream(device=device)
    with torch.cuda.stream(stream):
        x = torch.full((4096,), float(rank), device=device)
        hvd.allreduce_(x, op=hvd.Sum, name="cuda.side")
        total = x.sum()
    stream.synchronize()
    assert float(total.item()) == 4096 * sum(range(size))


def test_large_tensor(rank, size, device):
    x = torch.full((16 << 20,), float(rank + 1), device=device)  # 64 MiB
    hvd.allreduce_(x, op=hvd.Sum, name="cuda.large")
    assert float(x.min().item()) == float(x.max().item()) == size * (size + 1) / 2


def test_many_tensors_of_one_and_of_several_allocations(rank, size, device):
    block = torch.zeros(64 * 1024, device=device)
    views = [block[i * 1024:(i + 1) * 1024] for i in range(64)]
    separate = [torch.full((257,), float(i), device=device) for i in range(32)]
    for i, v in enumerate(views):
        v.fill_(float(rank * 100 + i))
    handles = [hvd.allreduce_async_(v, op=hvd.Sum, name="cuda.view.%d" % i) for i, v in enumerate(views)]
    handles += [hvd.allreduce_async_(t, op=hvd.Max, name="cuda.sep.%d" % i) for i, t in enumerate(separate)]
    for h in handles:
        hvd.synchronize(h)
    for i, v in enumerate(views):
        assert float(v[0].item()) == sum(r * 100 + i for r in range(size))
    for i, t in enumerate(separate):
        assert float(t[-1].item()) == float(i)


def test_more_operations_in_flight_than_event_slots(rank, size, device):
    # 600 > the 256 event pairs a rank has: submissions past that take back
    # the slots of finished operations not waited for yet (as
    # broadcast_parameters does for a large model).
    tensors = [torch.full((8,), float(rank + i), device=device) for i in range(600)]
    handles = [hvd.allreduce_async_(t, op=hvd.Sum, name="cuda.many.%d" % i) for i, t in enumerate(tensors)]
    for h in handles:
        hvd.synchronize(h)
    for i, t in enumerate(tensors):
        assert float(t[3].item()) == sum(r + i for r in range(size))


def test_grouped_allreduce(rank, size, device):
    tensors = [torch.full((n,), float(rank + 1), device=device) for n in (1, 100, 10000)]
    results = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="cuda.group")
    for r in results:
        assert r.device == device
        assert float(r.min().item()) == size * (size + 1) / 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8], ids=str)
def test_broadcast_from_every_root(rank, size, device, dtype):
    for root in range(size):
        x = contribution(rank, (5, 7), dtype).to(device)
        hvd.broadcast_(x, root_rank=root, name="cuda.bcast.%s.%d" % (dtype, root))
        assert torch.equal(x.cpu(), contribution(root, (5, 7), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_adasum_equals_the_cpu_path(rank, size, device, dtype):
    if size & (size - 1):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    x = contribution(rank, (257,), dtype)
    on_gpu = hvd.allreduce(x.to(device), op=hvd.Adasum, name="adasum.gpu.%s" % dtype)
    on_cpu = hvd.allreduce(x, op=hvd.Adasum, name="adasum.cpu.%s" % dtype)
    assert on_gpu.device == device
    assert torch.equal(on_gpu.cpu(), on_cpu)


def test_cpu_and_cuda_tensors_in_one_job(rank, size, device):
    on_gpu = hvd.allreduce(torch.ones(8, device=device), op=hvd.Sum, name="mixed.gpu")
    on_cpu = hvd.allreduce(torch.ones(8), op=hvd.Sum, name="mixed.cpu")
    assert on_gpu.device == device and on_cpu.device.type == "cpu"
    assert torch.equal(on_gpu.cpu(), on_cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_allgather_ragged(rank, size, device, dtype):
    result = hvd.allgather(contribution(rank, (rank + 1, 3), dtype).to(device))
    assert result.device == device
    expected = torch.cat([contribution(r, (r + 1, 3), dtype) for r in range(size)])
    assert torch.equal(result.cpu(), expected)


def test_alltoall_even_and_with_splits(rank, size, device):
    x = (torch.arange(size * 2, dtype=torch.float32) + 100 * rank).to(device)
    out = hvd.alltoall(x)
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(size)])
    assert torch.equal(out.cpu(), expected)
    splits = [rank + 1] * size
    y = torch.full((sum(splits), 2), float(rank), device=device)
    out, received = hvd.alltoall(y, splits=splits)
    assert received.tolist() == [r + 1 for r in range(size)]
    assert torch.equal(out.cpu(), torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]))


def test_async_allgathers_started_in_different_orders(rank, size, device):
    # Horovod lets ranks start named collectives in any order: the CUDA
    # allgather's size exchange must not make that deadlock.
    names = ["order.a", "order.b"]
    if rank % 2:
        names.reverse()
    handles = {n: hvd.allgather_async(torch.full((rank + 1,), float(rank), device=device), name=n) for n in names}
    for n in sorted(handles):
        out = hvd.synchronize(handles[n])
        assert out.numel() == size * (size + 1) // 2


def test_reducescatter(rank, size, device):
    rows = 2 * size + 1  # uneven: the first rank gets one extra row
    x = (torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + rank).to(device)
    out = hvd.reducescatter(x, op=hvd.Sum)
    total = sum(torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + r for r in range(size))
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    begin = sum(counts[:rank])
    assert out.device == device
    assert torch.equal(out.cpu(), total[begin:begin + counts[rank]])
    avg = hvd.reducescatter(x)
    assert torch.allclose(avg.cpu(), total[begin:begin + counts[rank]] / size)


def test_autograd_through_cuda_allreduce_and_allgather(rank, size, device):
    x = torch.full((4,), float(rank + 1), device=device, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum)
    (y * 2).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((4,), 2.0 * size))
    g = torch.ones(2, 2, device=device, requires_grad=True)
    hvd.allgather(g).sum().backward()
    assert g.grad.device == device


def test_wrong_output_size_is_refused_by_the_daemon(rank, size, device):
    # Through the C ABI's output fields, as another client might fill them.
    from gradsync import _native as native
    from gradsync.torch import _submit
    x = torch.ones(2, 3, device=device)
    out = torch.empty(1, 3, device=device)  # too small for size * 2 rows
    keep = []
    op = _submit.make_op(native.ALLGATHER, x, "cuda.bad_output", hvd.global_process_set, keep)
    op.output = out.data_ptr()
    op.output_bytes = out.numel() * 4
    handle = _submit.submit([op], keep + [out], lambda results: None, "bad output")
    with pytest.raises(GradsyncError, match="gave an output of 12 bytes; the result has"):
        hvd.synchronize(handle)
    assert float(hvd.allreduce(torch.ones(1, device=device), op=hvd.Sum).item()) == size


def test_release_cuda_exports_then_continue(rank, size, device):
    x = torch.ones(100, device=device)
    hvd.allreduce_(x, op=hvd.Sum, name="cuda.before_release")
    hvd.release_cuda_exports()
    torch.cuda.empty_cache()
    y = torch.ones(100, device=device)
    hvd.allreduce_(y, op=hvd.Sum, name="cuda.after_release")
    assert float(y[0].item()) == size


def test_memory_the_allocator_replaced_is_exported_again(rank, size, device):
    # With expandable segments the daemon maps each tensor's cuMem chunks;
    # empty_cache() unmaps free ones and a new tensor may get other memory at
    # the same addresses: the daemon must see the new memory, not the old.
    if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        pytest.skip("PyTorch's expandable segments are off")
    x = torch.full((8 << 20,), 1.0, device=device)  # 32 MiB: across 20 MiB mappings
    hvd.allreduce_(x, op=hvd.Sum, name="cuda.replaced")
    assert float(x.max().item()) == size
    del x
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    y = torch.full((8 << 20,), float(rank + 2), device=device)
    hvd.allreduce_(y, op=hvd.Sum, name="cuda.replaced")
    want = sum(r + 2 for r in range(size))
    assert float(y.min().item()) == float(y.max().item()) == want
