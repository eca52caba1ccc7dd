# SPDX-License-Identifier: Apache-2.0
"""CPU tensors in the rank's shared arena (gradsync's own API): the daemon
reads and writes them where they are, so their collectives copy nothing
into or out of the arena. DistributedOptimizer keeps gradients here by
default; empty(), zeros() and copy_of() place other tensors a training
loop reduces often (metrics, buffers, a model's parameters for broadcast).

An arena block goes back to the arena when the last tensor or view using it
is gone. At shutdown() gradients leave the arena, and any other arena tensor
still alive keeps its values in private memory at the same address (the
client library swaps the mapping), so nothing dangles."""
import ctypes
import threading
import weakref

import torch

from gradsync.errors import GradsyncError
from gradsync.torch import _context

ALIGN = 64


class _Blocks:
    """This process's live arena blocks, for the warning at shutdown."""

    def __init__(self):
        self._lock = threading.Lock()
        self._bytes = {}  # address -> bytes

    def add(self, address, nbytes):
        with self._lock:
            self._bytes[address] = nbytes

    def remove(self, address):
        with self._lock:
            self._bytes.pop(address, None)

    def live(self):
        with self._lock:
            return len(self._bytes), sum(self._bytes.values())


_blocks = _Blocks()


def _release(client, address):
    _blocks.remove(address)
    if client.is_open:
        try:
            client.free(address)
        except GradsyncError:
            pass  # the client is closing; its arena goes with it


def _block(nbytes):
    """A flat uint8 tensor of `nbytes` in the arena; the block is freed when
    the last tensor using it is gone (torch.frombuffer holds the buffer)."""
    client = _context.current().client
    size = max(-(-nbytes // ALIGN) * ALIGN, ALIGN)
    address = client.alloc(size)
    if not address:
        raise GradsyncError("shared arena: %d bytes do not fit (raise GRADSYNC_ARENA_BYTES)" % size)
    buffer = (ctypes.c_uint8 * size).from_address(address)
    _blocks.add(address, size)
    weakref.finalize(buffer, _release, client, address)
    return torch.frombuffer(buffer, dtype=torch.uint8)[:nbytes]


def _shape(size):
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(size)


def empty(*size, dtype=torch.float32):
    """An uninitialized CPU tensor in the shared arena."""
    shape = _shape(size)
    numel = 1
    for n in shape:
        numel *= n
    itemsize = torch.empty((), dtype=dtype).element_size()
    return _block(numel * itemsize).view(dtype).view(shape)


def zeros(*size, dtype=torch.float32):
    """A CPU tensor of zeros in the shared arena."""
    return empty(*size, dtype=dtype).zero_()


def copy_of(tensor):
    """A copy of a CPU tensor in the shared arena (same shape and dtype)."""
    if tensor.device.type != "cpu":
        raise ValueError("the shared arena holds CPU tensors; %s is on %s" % (tuple(tensor.shape), tensor.device))
    return empty(tensor.shape, dtype=tensor.dtype).copy_(tensor)


def live_blocks():
    """(count, bytes) of arena blocks still used by tensors of this process."""
    return _blocks.live()


class GradientArena:
    """Gradients of a set of parameters placed in one arena block (like
    DDP's gradient_as_bucket_view): autograd accumulates where the daemon
    reads, so no copy precedes or follows the allreduce."""

    def __init__(self, params):
        offsets, total = [], 0
        for p in params:
            offsets.append(total)
            total += -(-p.numel() * p.element_size() // ALIGN) * ALIGN
        flat = _block(total)
        self.views = {}
        for p, offset in zip(params, offsets):
            nbytes = p.numel() * p.element_size()
            self.views[p] = flat[offset:offset + nbytes].view(p.dtype).view(p.shape)
            self.views[p].zero_()
        _context.current().gradient_arenas.add(self)

    def attach(self, p):
        """Makes p.grad the arena view (copying a gradient made elsewhere)."""
        view = self.views[p]
        if p.grad is None:
            view.zero_()
        elif p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
        p.grad = view

    def holds(self, p):
        """Whether p.grad is p's arena view."""
        view = self.views.get(p)
        return view is not None and p.grad is not None and p.grad.data_ptr() == view.data_ptr()

    def forget(self, p):
        """p's gradients stay out of the arena (they are sparse)."""
        self.views.pop(p, None)

    def release(self):
        """Gradients still in the arena move to private memory; the block
        goes back once no other tensor uses it (the optimizer is gone, or
        the client shuts down)."""
        for p in [p for p in self.views if self.holds(p)]:
            p.grad = p.grad.clone()
        self.views = {}
