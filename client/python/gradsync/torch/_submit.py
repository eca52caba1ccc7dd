# SPDX-License-Identifier: Apache-2.0
"""From torch tensors to gradsync_op_t and back: the handle table behind
the async API (each handle: native handles, the objects they point into, and
how to build the output once they complete)."""
import contextlib
import ctypes

import torch

from gradsync import _native as native
from gradsync.errors import GradsyncError
from gradsync.torch import _context

_DTYPES = {
    torch.uint8: native.UINT8, torch.int8: native.INT8, torch.int16: native.INT16, torch.int32: native.INT32,
    torch.int64: native.INT64, torch.float16: native.FLOAT16, torch.bfloat16: native.BFLOAT16,
    torch.float32: native.FLOAT32, torch.float64: native.FLOAT64, torch.bool: native.BOOL,
}


_KINDS = {native.ALLREDUCE: "allreduce", native.ALLGATHER: "allgather", native.BROADCAST: "broadcast",
          native.ALLTOALL: "alltoall", native.REDUCESCATTER: "reducescatter"}


class _Pending:
    __slots__ = ("natives", "keep", "finish", "what", "names")

    def __init__(self, natives, keep, finish, what, names):
        self.natives = natives
        self.keep = keep
        self.finish = finish
        self.what = what
        self.names = names


def check_tensor(tensor, what):
    """Raises where Horovod does: TypeError for a non-tensor, ValueError for
    a tensor type gradsync does not move."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: tensor is on %s; gradsync.torch moves CPU and CUDA tensors" % (what, tensor.device))
    if tensor.dtype not in _DTYPES:
        raise ValueError("%s: tensor type %s is not supported" % (what, tensor.dtype))


@contextlib.contextmanager
def taking_part(collective, names, process_set):
    """Around the start of collectives `names`: when it fails on this rank
    (its own arguments, its client), this rank still takes part without data
    (gradsync_abandon), so that the other ranks' same collectives fail at once
    naming it instead of waiting for it, and the error is raised. Automatic
    names were drawn before, so later unnamed calls stay in step."""
    try:
        yield
    except Exception as error:
        done = getattr(error, "_gradsync_abandoned", set())  # by an inner call, or in flight already
        left = [n for n in names if n not in done]
        error._gradsync_abandoned = done | set(left)
        if left:
            _abandon(collective, left, process_set, "%s: %s" % (type(error).__name__, error))
        raise


def _abandon(collective, names, process_set, reason):
    ctx = _context.current()
    if process_set.process_set_id not in ctx.process_sets or not process_set.included():
        return  # the set's ranks do not wait for this rank
    for name in names:
        op = native.new_op(ctx.lib)
        op.collective = collective
        op.name = name.encode()
        op.process_set = process_set.process_set_id
        try:
            ctx.orphans.append(ctx.client.abandon(op, reason))  # released once the daemon answered
        except GradsyncError:
            pass  # the client is broken: the others learn it from the daemon

def make_op(collective, tensor, name, process_set, keep, **fields):
    """A gradsync_op_t over contiguous `tensor`; what it points to goes to `keep`."""
    ctx = _context.current()
    if process_set.process_set_id not in ctx.process_sets:
        raise ValueError("process set %s is unknown: give it to init() or add_process_set() (a removed set "
                         "cannot be used)" % (process_set,))
    if not process_set.included():
        raise ValueError("%s: rank %d is not a member of process set %d %s" % (
            name, ctx.client.rank, process_set.process_set_id, process_set.ranks))
    op = native.new_op(ctx.lib)
    op.collective = collective
    encoded = name.encode()
    shape = (ctypes.c_int64 * max(1, tensor.dim()))(*tensor.shape)
    keep.extend([encoded, shape, tensor])
    op.name = encoded
    op.dtype = _DTYPES[tensor.dtype]
    op.ndim = tensor.dim()
    op.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    op.data = tensor.data_ptr() if tensor.numel() else None
    op.process_set = process_set.process_set_id
    if tensor.is_cuda:
        # The daemon starts after the work queued so far on the current
        # stream, and synchronize() makes that stream wait for the result.
        op.device = native.DEVICE_CUDA
        op.stream = torch.cuda.current_stream(tensor.device).cuda_stream or None
    for key, value in fields.items():
        setattr(op, key, value)
    return op


class _Deferred:
    """An operation that starts once another completes (a CUDA allgather or
    alltoall, whose output is sized by a small CPU exchange first). Started
    by poll() or synchronize() of it, or by any wait that finds its first
    operation done: ranks that wait on several in different orders then
    never wait on each other."""
    __slots__ = ("first", "start", "second", "error")

    def __init__(self, first, start):
        self.first = first
        self.start = start
        self.second = None
        self.error = None


def defer(first, start):
    """A handle for `start(result of first)`, which returns the handle of
    the operation it starts."""
    ctx = _context.current()
    handle = ctx.new_handle()
    ctx.pending[handle] = _Deferred(first, start)
    return handle


def _started(deferred):
    """The handle of the started operation (starting it now if needed); a
    failure to start is kept and raised to every later caller."""
    if deferred.error is not None:
        raise deferred.error
    if deferred.second is None:
        try:
            deferred.second = deferred.start(synchronize(deferred.first, start_others=False))
        except Exception as error:  # e.g. the size exchange failed: kept for synchronize
            deferred.error = error
            raise
    return deferred.second


def start_ready():
    """Starts every deferred operation whose first operation has completed."""
    for pending in _unstarted(_context.current()):
        try:
            if poll(pending.first):
                _started(pending)
        except Exception:  # kept in the deferred, raised by its synchronize
            pass


def _unstarted(ctx):
    """The deferred operations not started yet (and not failed)."""
    return [p for p in ctx.pending.values() if isinstance(p, _Deferred) and p.second is None and p.error is None]


def _name_taken(ctx, name):
    """Whether a collective of this rank named `name` has not run yet (one
    that ran frees its name, synchronized or not, as in Horovod). Under
    ctx.lock."""
    natives = ctx.in_flight.get(name)
    if natives is None:
        return False
    if natives and all(ctx.client.poll(n) for n in natives):  # () : being enqueued on another thread
        del ctx.in_flight[name]
        return False
    return True


def submit(ops, keep, finish, what):
    """Enqueues `ops` (several: a group) and returns the Python handle. A
    name this rank has in flight already raises ValueError, as in Horovod."""
    ctx = _context.current()
    names = [op.name.decode() for op in ops if op.name]
    with ctx.lock:  # autograd may run hooks on other threads
        for name in names:
            if _name_taken(ctx, name):
                error = ValueError("Requested to %s a tensor with the same name as another tensor that is "
                                   "currently being processed ('%s'). If you want to request another tensor, use a "
                                   "different tensor name." % (_KINDS.get(ops[0].collective, "run"), name))
                error._gradsync_abandoned = {name}  # the first one stays: the others must not fail it
                raise error
        for name in names:
            ctx.in_flight[name] = ()  # taken (no native handle yet: never found to have run)
    try:
        natives = ctx.client.enqueue_group(ops, what) if len(ops) > 1 else [ctx.client.enqueue(ops[0], what)]
    except Exception:
        with ctx.lock:
            for name in names:
                ctx.in_flight.pop(name, None)
        raise
    with ctx.lock:
        for name in names:
            ctx.in_flight[name] = tuple(natives)
    handle = ctx.new_handle()
    ctx.pending[handle] = _Pending(natives, keep, finish, what, names)
    return handle


def poll(handle):
    """True when the operation of `handle` has completed."""
    ctx = _context.current()
    pending = ctx.pending.get(handle)
    if pending is None:
        raise ValueError("unknown or already synchronized handle %s" % handle)
    if isinstance(pending, _Deferred):
        if pending.error is None and pending.second is None and not poll(pending.first):
            return False
        return poll(_started(pending))
    return all(ctx.client.poll(n) for n in pending.natives)


def synchronize(handle, start_others=True):
    """Waits for `handle` and returns its output (raises GradsyncError).
    While it waits, deferred operations whose first operation completed are
    started (`start_others`)."""
    ctx = _context.current()
    pending = ctx.pending.pop(handle, None)
    if pending is None:
        raise ValueError("unknown or already synchronized handle %s" % handle)
    if isinstance(pending, _Deferred):
        return synchronize(_started(pending), start_others)
    # Waits in short slices only while some deferred operation may need starting.
    between = start_ready if start_others and _unstarted(ctx) else None
    _free_names(ctx, pending)
    try:
        for n in pending.natives:
            ctx.client.wait(n, pending.what, between=between)
        return pending.finish([ctx.client.result(n) for n in pending.natives])
    finally:
        # After an error other members of a group may still be in flight:
        # the first error is raised now, and they are released once they end.
        for n in pending.natives:
            if ctx.client.poll(n):
                ctx.client.release(n)
            else:
                ctx.orphans.append(n)
        _release_ended_orphans(ctx)


def _free_names(ctx, pending):
    """Frees the names of `pending` (unless a later collective took one
    after this one ran)."""
    mine = tuple(pending.natives)
    with ctx.lock:
        for name in pending.names:
            if ctx.in_flight.get(name) == mine:
                del ctx.in_flight[name]


def _release_ended_orphans(ctx):
    still = []
    for n in ctx.orphans:
        try:
            done = ctx.client.poll(n)
        except GradsyncError:
            continue  # unknown to the client any more
        if done:
            ctx.client.release(n)
        else:
            still.append(n)
    ctx.orphans = still


def tensor_from_result(result, dtype, what):
    """Copies a library-owned output (gradsync_result_t) into a new tensor."""
    shape = [result.shape[i] for i in range(result.ndim)]
    out = torch.empty(shape, dtype=dtype)
    expected = out.numel() * out.element_size()
    if result.bytes != expected:
        raise GradsyncError("%s: daemon returned %d bytes for shape %s" % (what, result.bytes, shape))
    if expected:
        ctypes.memmove(out.data_ptr(), result.data, expected)
    return out


def received_splits(result):
    return torch.tensor([result.received_splits[i] for i in range(result.num_received_splits)], dtype=torch.int32)
