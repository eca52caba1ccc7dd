# SPDX-License-Identifier: Apache-2.0
"""Model/optimizer state and Python objects across ranks (Horovod's
broadcast_parameters, broadcast_optimizer_state, broadcast_object,
allgather_object)."""
import ctypes
import io
import pickle

import torch

from gradsync.torch import _context
from gradsync.torch import optimizer as _optimizer_module
from gradsync.torch.mpi_ops import allgather, broadcast_, broadcast_async_
from gradsync.torch._submit import synchronize
from gradsync.torch.process_sets import global_process_set


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites `params` (a state_dict, or a list of (name, tensor) such as
    model.named_parameters()) with root_rank's values, in place."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        for p in params:
            if not isinstance(p, tuple) or len(p) != 2:
                raise ValueError("invalid params: expected (name, tensor) pairs, got %r" % (p,))
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    for name, p in params:
        if p is None:
            continue
        target = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(broadcast_async_(target, root_rank, "broadcast_parameters." + name, process_set))
    for handle in handles:
        synchronize(handle)


def _dumps(obj):
    buffer = io.BytesIO()
    pickle.dump(obj, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _loads(tensor):
    tensor = tensor.contiguous()
    return pickle.loads(ctypes.string_at(tensor.data_ptr(), tensor.numel()))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (anything picklable) on every rank of the set."""
    name = name or _context.current().auto_name("broadcast_object", process_set.process_set_id)
    ctx = _context.current()
    data = _dumps(obj) if ctx.client.rank == root_rank else torch.empty(0, dtype=torch.uint8)
    length = torch.tensor([data.numel()], dtype=torch.int64)
    broadcast_(length, root_rank, name + ".size", process_set)
    if ctx.client.rank != root_rank:
        data = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name + ".data", process_set)
    return obj if ctx.client.rank == root_rank else _loads(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """List of every rank's `obj`, in rank order of the set."""
    name = name or _context.current().auto_name("allgather_object", process_set.process_set_id)
    data = _dumps(obj)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name + ".sizes", process_set)
    gathered = allgather(data, name + ".data", process_set)
    return [_loads(chunk) for chunk in torch.split(gathered, sizes.tolist())]


def _initialize_state(optimizer):
    """A new optimizer has no state yet (momentum buffers, Adam's moments):
    as Horovod, every parameter that requires a gradient gets a zero one
    (sparse for SparseAdam) and one local step makes the state. A
    DistributedOptimizer steps as its wrapped optimizer: its own step would
    allreduce."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p.data)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if type(optimizer).__module__ == _optimizer_module.__name__:
        super(type(optimizer), optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (hyper-parameters per param group,
    and per-parameter state such as momentum buffers) equal to root_rank's."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    state = broadcast_object(optimizer.state_dict(), root_rank, "broadcast_optimizer_state", process_set)
    if _context.current().client.rank != root_rank:
        optimizer.load_state_dict(state)
