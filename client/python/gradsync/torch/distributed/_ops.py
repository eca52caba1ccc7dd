# SPDX-License-Identifier: Apache-2.0
"""From c10d's arguments to gradsync_op_t and back: reductions, flat views
of tensors, and copies out of the library-owned results."""
import ctypes

import torch

from gradsync import _native as native
from gradsync.torch._submit import _DTYPES

_REDUCTIONS = {
    "SUM": native.SUM, "AVG": native.AVERAGE, "PRODUCT": native.PRODUCT, "MIN": native.MIN, "MAX": native.MAX,
}


def reduction(reduce_op):
    """(gradsync reduction, prescale) of a c10d ReduceOp; PREMUL_SUM is a
    sum of the inputs scaled by its factor. ValueError for the bitwise ones."""
    kind = getattr(reduce_op, "op", reduce_op)
    name = getattr(kind, "name", str(kind)).split(".")[-1]
    if name == "PREMUL_SUM":
        factor = reduce_op.factor
        return native.SUM, float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    if name not in _REDUCTIONS:
        raise ValueError("gradsync: reduction %s is not supported (SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM are)"
                         % name)
    return _REDUCTIONS[name], 0.0


def new_op(lib, collective, name, flat, keep, **fields):
    """A gradsync_op_t over the 1-D contiguous tensor `flat`; what the op
    points to goes to `keep` (alive until the operation completed)."""
    op = native.new_op(lib)
    op.collective = collective
    encoded = name.encode()
    shape = (ctypes.c_int64 * 1)(flat.numel())
    keep.extend([encoded, shape, flat])
    op.name = encoded
    op.dtype = _DTYPES[flat.dtype]
    op.ndim = 1
    op.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    op.data = flat.data_ptr() if flat.numel() else None
    if flat.is_cuda:
        op.device = native.DEVICE_CUDA
        op.stream = torch.cuda.current_stream(flat.device).cuda_stream or None
    splits = fields.pop("splits", None)
    if splits is not None:
        array = (ctypes.c_int64 * max(1, len(splits)))(*splits)
        keep.append(array)
        op.splits = ctypes.cast(array, ctypes.POINTER(ctypes.c_int64))
        op.num_splits = len(splits)
    for key, value in fields.items():
        setattr(op, key, value)
    return op


def device_output(like, numel, keep):
    """CUDA collectives with an output (allgather, reducescatter, alltoall)
    write into a buffer the caller gives (gradsync.h): a tensor of `numel`
    elements on `like`'s device, kept alive with the op; None on the CPU,
    where the library owns the output."""
    if not like.is_cuda:
        return None
    target = torch.empty(numel, dtype=like.dtype, device=like.device)
    keep.append(target)
    return target


def output_fields(target):
    """The op's output fields for a device_output() target."""
    if target is None:
        return {}
    return {"output": target.data_ptr(), "output_bytes": target.numel() * target.element_size()}


def received(result, target, dtype, what, numel):
    """The 1-D output of a completed op: the CUDA target, or the library's."""
    return target if target is not None else result_view(result, dtype, what, numel)


def flat_view(tensor):
    """(1-D contiguous tensor over the same data or a copy, copy-back needed)."""
    if tensor.is_contiguous():
        return tensor.view(-1), False
    return tensor.contiguous().view(-1), True


def result_view(result, dtype, what, expected_numel=None):
    """The library-owned output of a completed operation as a 1-D tensor
    (valid until the handle is released: copy out of it before)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if result.bytes % itemsize:
        raise RuntimeError("%s: the daemon returned %d bytes, not a whole number of %s" % (what, result.bytes, dtype))
    numel = result.bytes // itemsize
    if expected_numel is not None and numel != expected_numel:
        raise RuntimeError("%s: received %d elements where the output holds %d (the ranks' tensors differ in size)"
                           % (what, numel, expected_numel))
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    buffer = (ctypes.c_char * result.bytes).from_address(result.data)
    return torch.frombuffer(buffer, dtype=dtype)


def received_splits(result):
    return [result.received_splits[i] for i in range(result.num_received_splits)]


def copy_chunks(source, outputs, what):
    """Copies consecutive pieces of the 1-D `source` into `outputs`."""
    offset = 0
    for out in outputs:
        n = out.numel()
        if offset + n > source.numel():
            raise RuntimeError("%s: received %d elements, fewer than the outputs hold" % (what, source.numel()))
        out.copy_(source[offset:offset + n].view(out.shape))
        offset += n
    if offset != source.numel():
        raise RuntimeError("%s: received %d elements where the outputs hold %d" % (what, source.numel(), offset))


def rows(tensor):
    """Elements per first-dimension row of `tensor`."""
    if tensor.dim() == 0:
        return 1
    n = 1
    for d in tensor.shape[1:]:
        n *= d
    return n

