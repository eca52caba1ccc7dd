# SPDX-License-Identifier: Apache-2.0
"""TorchState (Horovod's): a model, an optimizer, samplers and plain values
kept across membership changes, with two-phase commits (see
gradsync.common.elastic)."""
import copy

import torch

from gradsync.common.elastic import ObjectState
from gradsync.torch import _context, basics
from gradsync.torch.elastic.sampler import ElasticSampler
from gradsync.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class StateHandler:
    """Keeps one value: save() takes a snapshot (tentative inside a commit),
    acknowledge() makes it the committed one, restore() goes back to it,
    sync() broadcasts it from rank 0."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def acknowledge(self):
        pass

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()
        self.acknowledge()


class _SnapshotHandler(StateHandler):
    """A handler whose snapshot is a deep copy of the value's state_dict()."""

    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())
        self._pending = None

    def save(self):
        self._pending = copy.deepcopy(self.value.state_dict())

    def acknowledge(self):
        if self._pending is not None:
            self._saved, self._pending = self._pending, None

    def restore(self):
        self._pending = None
        self.value.load_state_dict(self._saved)


class ModelStateHandler(_SnapshotHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_SnapshotHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(_SnapshotHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for value_type, handler_type in _handler_registry:
        if isinstance(value, value_type):
            return handler_type(value)
    return None


def _commit_barrier():
    return _context.current().client.commit_barrier()


class TorchState(ObjectState):
    """The state of a PyTorch training process: `model`, `optimizer` and
    keyword arguments (a registered type gets its handler; anything else is
    a plain value)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value) if value is not None else None
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, barrier=_commit_barrier, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def _acknowledge(self):
        for handler in self._handlers.values():
            handler.acknowledge()
        super()._acknowledge()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        if name != "_handlers" and hasattr(self, "_handlers") and name in self._handlers and hasattr(self, name):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
