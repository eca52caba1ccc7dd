# SPDX-License-Identifier: Apache-2.0
"""Horovod's collective API on gradsync: sync, async (handle) and in-place
variants, with autograd support. Module name kept from horovod.torch so that
code importing from it keeps working."""
import ctypes
import numbers
import warnings

import torch

from gradsync import _native as native
from gradsync.errors import GradsyncError
from gradsync.torch import _context
from gradsync.torch._submit import (check_tensor, defer, make_op, poll, received_splits, submit, synchronize,
                                    taking_part, tensor_from_result)
from gradsync.torch.compression import Compression
from gradsync.torch.process_sets import global_process_set

# Reduction ops (Horovod's names); values are libgradsync's.
Sum = native.SUM
Average = native.AVERAGE
Min = native.MIN
Max = native.MAX
Product = native.PRODUCT
Adasum = native.ADASUM

HorovodInternalError = GradsyncError


def _resolve_op(average, op, default=Average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average; use op only.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed.", DeprecationWarning)
        return Average if average else Sum
    op = default if op is None else op
    if op not in (Sum, Average, Min, Max, Product, Adasum):
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def _name(name, kind, process_set=global_process_set):
    """The collective's name. Every public call draws it first, before any
    check that can raise, so automatic names stay equal across ranks."""
    return name if name is not None else _context.current().auto_name(kind, process_set.process_set_id or 0)


def _member_names(base, tensors):
    return ["%s.%d" % (base, i) for i in range(len(tensors))]


def _check_adasum(tensor, process_set, what):
    """Horovod's rules for Adasum: a power-of-two number of ranks
    (NotImplementedError, Horovod's text), floating-point tensors (ValueError
    at the call; Horovod fails them later). CUDA tensors go through host
    memory in the daemon, with the CPU path's result."""
    n = process_set.size()
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")
    if not tensor.dtype.is_floating_point:
        raise ValueError("%s: Adasum needs a floating-point tensor, got %s" % (what, tensor.dtype))


def _check_reduction(tensor, op, prescale_factor, postscale_factor, what, process_set=global_process_set):
    """bool tensors reduce only with Min and Max (logical and, or), unscaled."""
    if op == Adasum:
        _check_adasum(tensor, process_set, what)
    if tensor.dtype == torch.bool and (op not in (Min, Max) or _scale(prescale_factor) != 1.0
                                       or _scale(postscale_factor) != 1.0):
        raise ValueError("%s: a bool tensor reduces only with Min or Max and no scaling" % what)


def _scale(value):
    return float(value) if value is not None else 1.0


# -- allreduce --------------------------------------------------------------

def _in_place_target(tensor):
    """A contiguous tensor to hand over for an in-place collective on
    `tensor`, and the function that writes its result back into `tensor`."""
    if tensor.is_contiguous():
        return tensor, lambda: tensor
    target = tensor.contiguous()
    return target, lambda: tensor.copy_(target)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; synchronize(handle) returns it."""
    name = _name(name, "allreduce", process_set)
    with taking_part(native.ALLREDUCE, [name], process_set):
        op = _resolve_op(average, op)
        what = "allreduce of '%s'" % name
        check_tensor(tensor, what)
        _check_reduction(tensor, op, prescale_factor, postscale_factor, what, process_set)
        target, write_back = _in_place_target(tensor)
        keep = []
        native_op = make_op(native.ALLREDUCE, target, name, process_set, keep, reduce_op=op,
                            prescale=_scale(prescale_factor), postscale=_scale(postscale_factor))
        return submit([native_op], keep, lambda _results: write_back(), what)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce; synchronize(handle) returns a new tensor."""
    name = _name(name, "allreduce", process_set)
    with taking_part(native.ALLREDUCE, [name], process_set):
        check_tensor(tensor, "allreduce of '%s'" % name)
        output = tensor.detach().clone(memory_format=torch.contiguous_format)
        return allreduce_async_(output, average, name, op, prescale_factor, postscale_factor, process_set)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, process_set = ctx.args
        return (allreduce(grad_output, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set),
                None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the ranks of `process_set` (default: average) and
    returns the result as a new tensor; differentiable."""
    name = _name(name, "allreduce", process_set)
    with taking_part(native.ALLREDUCE, [name], process_set):
        op = _resolve_op(average, op)
        check_tensor(tensor, "allreduce of '%s'" % name)
        compressed, cctx = compression.compress(tensor)
    summed = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(summed, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


# -- grouped allreduce ------------------------------------------------------

def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """Starts allreduces of `tensors` negotiated and run together, in place."""
    base = _name(name, "grouped_allreduce", process_set)
    names = _member_names(base, tensors)
    with taking_part(native.ALLREDUCE, names, process_set):
        op = _resolve_op(average, op)
        if not names:
            raise ValueError("grouped_allreduce needs at least one tensor")
        for member, tensor in zip(names, tensors):
            check_tensor(tensor, "grouped allreduce of '%s'" % member)
            _check_reduction(tensor, op, prescale_factor, postscale_factor, "grouped allreduce of '%s'" % member,
                             process_set)
        targets, write_backs = zip(*[_in_place_target(t) for t in tensors])
        keep = []
        ops = [make_op(native.ALLREDUCE, target, member, process_set, keep, reduce_op=op,
                       prescale=_scale(prescale_factor), postscale=_scale(postscale_factor))
               for member, target in zip(names, targets)]
        return submit(ops, keep, lambda _results: [write_back() for write_back in write_backs],
                      "grouped allreduce '%s'" % base)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    base = _name(name, "grouped_allreduce", process_set)
    with taking_part(native.ALLREDUCE, _member_names(base, tensors), process_set):
        for member, tensor in zip(_member_names(base, tensors), tensors):
            check_tensor(tensor, "grouped allreduce of '%s'" % member)
        outputs = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
        return grouped_allreduce_async_(outputs, average, base, op, prescale_factor, postscale_factor, process_set)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, pre, post, process_set = ctx.args
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=op, prescale_factor=pre,
                                  postscale_factor=post, process_set=process_set)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce of a list of tensors as one negotiated group; differentiable."""
    base = _name(name, "grouped_allreduce", process_set)
    with taking_part(native.ALLREDUCE, _member_names(base, tensors), process_set):
        op = _resolve_op(average, op)
        for member, tensor in zip(_member_names(base, tensors), tensors):
            check_tensor(tensor, "grouped allreduce of '%s'" % member)
        pairs = [compression.compress(t) for t in tensors]
    summed = _GroupedAllreduce.apply(base, op, prescale_factor, postscale_factor, process_set, *[p[0] for p in pairs])
    return [compression.decompress(s, p[1]) for s, p in zip(summed, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# -- allgather --------------------------------------------------------------

def _output_op(collective, kind, tensor, name, process_set, finish_one, split_list=None, keep_alive=(), **fields):
    with taking_part(collective, [name], process_set):
        return _start_output_op(collective, kind, tensor, name, process_set, finish_one, split_list, keep_alive,
                                **fields)


def _start_output_op(collective, kind, tensor, name, process_set, finish_one, split_list, keep_alive, **fields):
    what = "%s of '%s'" % (kind, name)
    check_tensor(tensor, what)
    source = tensor.detach().contiguous()
    keep = list(keep_alive)  # what `fields` point into
    op = make_op(collective, source, name, process_set, keep, **fields)
    if not source.is_cuda:
        return submit([op], keep, lambda results: finish_one(results[0], what, None), what)

    def start(out_rows):
        # The daemon writes the CUDA result straight into this tensor.
        output = torch.empty((out_rows,) + tuple(source.shape[1:]), dtype=source.dtype, device=source.device)
        keep.append(output)
        op.output = output.data_ptr() if output.numel() else None
        op.output_bytes = output.numel() * output.element_size()
        return submit([op], keep, lambda results: finish_one(results[0], what, output), what)

    rows = source.shape[0] if source.dim() else 1
    if collective == native.REDUCESCATTER:  # Horovod's rule, known locally
        n, me = process_set.size(), process_set.rank()
        return start(rows // n + (1 if me < rows % n else 0))
    # Allgather and alltoall learn the other ranks' row counts first, with a
    # small CPU collective named after the tensor; the CUDA one starts once
    # that completes (at poll or synchronize), so ranks may start them in
    # any order, as in Horovod.
    if collective == native.ALLGATHER:
        sizes = allgather_async(torch.tensor([rows], dtype=torch.int64), name + ".rows", process_set)
        return defer(sizes, lambda counts: start(int(counts.sum().item())))
    n = process_set.size()
    mine = list(split_list) if split_list is not None else [rows // n] * n
    sizes = alltoall_async(torch.tensor(mine, dtype=torch.int64), None, name + ".splits", process_set)
    return defer(sizes, lambda received: start(int(received[0].sum().item())))


def _output_of(result, dtype, what, output):
    """The finished output: the CUDA tensor the daemon wrote, or a copy of the
    library-owned CPU result."""
    return output if output is not None else tensor_from_result(result, dtype, what)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather along dim 0 (sizes may differ by rank)."""
    name = _name(name, "allgather", process_set)
    return _output_op(native.ALLGATHER, "allgather", tensor, name, process_set,
                      lambda result, what, output: _output_of(result, tensor.dtype, what, output))


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        process_set = ctx.process_set
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=process_set)
        offset = int(rows[:process_set.rank()].sum().item())
        return grad_reduced.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's `tensor` along dim 0; differentiable."""
    return _Allgather.apply(tensor, _name(name, "allgather", process_set), process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    names = _member_names(_name(name, "grouped_allgather", process_set), tensors)
    with taking_part(native.ALLGATHER, names, process_set):
        return _GroupHandle([allgather_async(t, member, process_set) for member, t in zip(names, tensors)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    names = _member_names(_name(name, "grouped_allgather", process_set), tensors)
    with taking_part(native.ALLGATHER, names, process_set):
        for member, tensor in zip(names, tensors):
            check_tensor(tensor, "allgather of '%s'" % member)
    return [allgather(t, member, process_set) for member, t in zip(names, tensors)]


# -- broadcast --------------------------------------------------------------

def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast from `root_rank`."""
    name = _name(name, "broadcast", process_set)
    with taking_part(native.BROADCAST, [name], process_set):
        what = "broadcast of '%s'" % name
        check_tensor(tensor, what)
        target, write_back = _in_place_target(tensor)
        keep = []
        op = make_op(native.BROADCAST, target, name, process_set, keep, root_rank=int(root_rank))
        return submit([op], keep, lambda _results: write_back(), what)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    name = _name(name, "broadcast", process_set)
    with taking_part(native.BROADCAST, [name], process_set):
        check_tensor(tensor, "broadcast of '%s'" % name)
        output = tensor.detach().clone(memory_format=torch.contiguous_format)
        return broadcast_async_(output, root_rank, name, process_set)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if _context.current().client.rank != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """`root_rank`'s `tensor` on every rank, as a new tensor; differentiable."""
    return _Broadcast.apply(tensor, root_rank, _name(name, "broadcast", process_set), process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# -- alltoall ---------------------------------------------------------------

def _check_even_rows(rows, process_set, what):
    """An alltoall without splits sends rows / size to each rank of the set:
    ValueError at the call when the size does not divide them (Horovod)."""
    ranks = process_set.size() if process_set.included() else None
    if ranks and rows % ranks != 0:
        raise ValueError("%s: the tensor's first dimension %d is not a multiple of the process set's %d ranks "
                         "(give splits for an uneven alltoall)" % (what, rows, ranks))


def _splits_array(splits, tensor, process_set, what):
    """The splits as a C array, checked as far as this rank can: integers,
    one per rank of the set, none negative, summing to the first dimension;
    without splits, a first dimension the set's size divides (ValueError
    otherwise, as Horovod raises at the call)."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if splits is None:
        _check_even_rows(rows, process_set, what)
        return None, 0
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError("%s: splits must be integers, got a %s tensor" % (what, splits.dtype))
        if splits.dim() > 1:
            raise ValueError("%s: splits must be a 1-D tensor, got shape %s" % (what, list(splits.shape)))
        values = [int(v) for v in splits.reshape(-1).tolist()]
    else:
        values = list(splits)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
            raise ValueError("%s: splits must be integers, got %s" % (what, values))
    if len(values) != process_set.size():
        raise ValueError("%s: %d splits for a process set of %d ranks" % (what, len(values), process_set.size()))
    if any(v < 0 for v in values):
        raise ValueError("%s: splits must not be negative, got %s" % (what, values))
    if sum(values) != rows:
        raise ValueError("%s: splits sum to %d, but the tensor's first dimension is %d" % (what, sum(values), rows))
    array = (ctypes.c_int64 * max(1, len(values)))(*[int(v) for v in values])
    return array, len(values)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rows splits[i] go to rank i of the set (even split
    when None); synchronize returns (output, received_splits)."""
    name = _name(name, "alltoall", process_set)
    with taking_part(native.ALLTOALL, [name], process_set):
        check_tensor(tensor, "alltoall of '%s'" % name)
        array, count = _splits_array(splits, tensor, process_set, "alltoall of '%s'" % name)
        fields = {}
        if array is not None:
            fields = {"splits": ctypes.cast(array, ctypes.POINTER(ctypes.c_int64)), "num_splits": count}
    return _output_op(native.ALLTOALL, "alltoall", tensor, name, process_set,
                      lambda result, what, output: (_output_of(result, tensor.dtype, what, output),
                                                    received_splits(result)),
                      split_list=None if array is None else list(array)[:count],
                      keep_alive=() if array is None else (array,), **fields)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of `tensor` to the ranks of the set and gathers what they
    send; returns the output, and with `splits` given (output,
    received_splits), as Horovod does; differentiable."""
    output, received = _Alltoall.apply(tensor, splits, _name(name, "alltoall", process_set), process_set)
    return output if splits is None else (output, received)


# -- reducescatter ----------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter along dim 0 (the first ranks get one extra row
    when the rows do not divide evenly)."""
    name = _name(name, "reducescatter", process_set)
    with taking_part(native.REDUCESCATTER, [name], process_set):
        op = _resolve_op(None, op)
        if op == Adasum:
            raise NotImplementedError("Adasum is an allreduce; reducescatter does not take it")
        check_tensor(tensor, "reducescatter of '%s'" % name)
        _check_reduction(tensor, op, prescale_factor, postscale_factor, "reducescatter of '%s'" % name)
    return _output_op(native.REDUCESCATTER, "reducescatter", tensor, name, process_set,
                      lambda result, what, output: _output_of(result, tensor.dtype, what, output), reduce_op=op,
                      prescale=_scale(prescale_factor), postscale=_scale(postscale_factor))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, process_set, pre, post = ctx.args
        # Horovod's rule: Sum scales by the set size, Average does not.
        scale = pre * post * (process_set.size() if op == Sum else 1)
        grad = grad_output.contiguous() * scale if scale != 1 else grad_output.contiguous()
        return allgather(grad, process_set=process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's slice of dim 0; differentiable."""
    name = _name(name, "reducescatter", process_set)
    with taking_part(native.REDUCESCATTER, [name], process_set):
        check_tensor(tensor, "reducescatter of '%s'" % name)
        compressed, cctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    names = _member_names(_name(name, "grouped_reducescatter", process_set), tensors)
    with taking_part(native.REDUCESCATTER, names, process_set):
        return _GroupHandle([reducescatter_async(t, member, op, process_set, prescale_factor, postscale_factor)
                             for member, t in zip(names, tensors)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    names = _member_names(_name(name, "grouped_reducescatter", process_set), tensors)
    with taking_part(native.REDUCESCATTER, names, process_set):
        for member, tensor in zip(names, tensors):
            check_tensor(tensor, "reducescatter of '%s'" % member)
    return [reducescatter(t, member, compression, op, process_set, prescale_factor, postscale_factor)
            for member, t in zip(names, tensors)]


# -- group handles, barrier, join -------------------------------------------

class _GroupHandle:
    """Handle of a group of independent operations (grouped allgather and
    reducescatter run as separate, concurrently negotiated collectives)."""

    def __init__(self, handles):
        self.handles = handles


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts a sparse allreduce as Horovod does it: an allgather of the
    indices and one of the values, rebuilt into a sparse tensor of the
    concatenated entries (duplicates are summed when it is coalesced or
    used); Average divides the values by the set's size. Returns a handle
    for synchronize() (a callable, as in Horovod)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse COO tensor")
    if op not in (Average, Sum):
        raise ValueError("sparse allreduce supports Average and Sum only")
    indices_handle = allgather_async(tensor._indices().transpose(0, 1).contiguous(), name="%s.indices" % name,
                                     process_set=process_set)
    values_handle = allgather_async(tensor._values(), name="%s.values" % name, process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / process_set.size()
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, tensor.size())

    return handle


def _synchronize(handle):
    if callable(handle):  # a sparse allreduce
        return handle()
    if isinstance(handle, _GroupHandle):
        return [synchronize(h) for h in handle.handles]
    return synchronize(handle)


def _poll(handle):
    if callable(handle):
        raise ValueError("a sparse allreduce handle cannot be polled; synchronize it")
    if isinstance(handle, _GroupHandle):
        return all(poll(h) for h in handle.handles)
    return poll(handle)


def barrier(process_set=global_process_set):
    """Returns when every rank of the set has called barrier."""
    ctx = _context.current()
    op = native.new_op(ctx.lib)
    op.collective = native.BARRIER
    # Counted per set: ranks outside a set skip its barriers.
    name = ctx.auto_name("barrier", process_set.process_set_id).encode()
    op.name = name
    op.process_set = process_set.process_set_id
    synchronize(submit([op], [name], lambda _results: None, "barrier"))


def join(device=-1):
    """Marks this rank as out of data: until every rank has joined, it
    contributes nothing to others' allreduces. Returns the last rank to join."""
    ctx = _context.current()
    op = native.new_op(ctx.lib)
    op.collective = native.JOIN
    return synchronize(submit([op], [], lambda results: int(results[0].last_joined_rank), "join"))


__all__ = ["Sum", "Average", "Min", "Max", "Product", "Adasum", "allreduce", "allreduce_", "allreduce_async",
           "allreduce_async_", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
           "grouped_allreduce_async_", "allgather", "allgather_async", "grouped_allgather",
           "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall",
           "alltoall_async", "reducescatter", "reducescatter_async", "grouped_reducescatter",
           "grouped_reducescatter_async", "sparse_allreduce_async", "barrier", "join", "HorovodInternalError"]
