# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer: allreduces each gradient as soon as autograd has
produced it, and waits for all of them before the wrapped optimizer steps."""
import contextlib
import warnings
import weakref

import torch

from gradsync.errors import GradsyncError
from gradsync.torch import _context
from gradsync.torch.arena import GradientArena
from gradsync.torch.compression import Compression
from gradsync.torch.mpi_ops import (Adasum, Average, _synchronize, allreduce_async_, grouped_allreduce_async_,
                                    sparse_allreduce_async)
from gradsync.torch.process_sets import global_process_set


# Horovod's messages.
_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
_ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                   "optimizer.synchronize(). This is prohibited as it can cause a race condition.")


def _setup(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    """What both distributed optimizers keep: parameter names, the parameters
    to update and their countdown of backward passes, the pending handles."""
    optimizer._compression = compression
    optimizer._process_set = process_set
    optimizer.backward_passes_per_step = backward_passes_per_step
    all_params = [p for group in optimizer.param_groups for p in group["params"]]
    optimizer._parameter_names = _names_of(named_parameters, all_params)
    optimizer._requires_update = [p for p in all_params if p.requires_grad]
    optimizer._allreduce_delay = {p: backward_passes_per_step for p in optimizer._requires_update}
    optimizer._handles = {}
    optimizer._grad_accs = []


def _register_hooks(optimizer):
    """optimizer._make_hook(p) runs once p's gradient is accumulated."""
    for p in optimizer._requires_update:
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(optimizer._make_hook(p))
        optimizer._grad_accs.append(accumulator)


def _names_of(named_parameters, all_params):
    if named_parameters is None:
        return {p: "allreduce.noname.%d" % i for i, p in enumerate(all_params)}
    named = list(named_parameters)
    if any(not isinstance(p, tuple) for p in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                         "produced by model.named_parameters().")
    names = [n for n, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(duplicates))
    by_param = {p: "allreduce." + n for n, p in named}
    missing = [p for p in all_params if p not in by_param]
    if missing:
        raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                         "Python object ids: %s" % ", ".join(str(id(p)) for p in missing))
    return by_param


def _zero_grad(optimizer, base, set_to_none):
    """torch's zero_grad, refused while reductions are pending (Horovod's rule)."""
    if optimizer._handles:
        raise AssertionError(_ZERO_GRAD_RACE)
    if set_to_none is None:
        return super(base, optimizer).zero_grad()
    return super(base, optimizer).zero_grad(set_to_none=set_to_none)


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set, zero_copy):
        super(self.__class__, self).__init__(params)
        _setup(self, named_parameters, compression, backward_passes_per_step, process_set)
        self._op = op
        self._sparse_as_dense = sparse_as_dense
        self._predivide = gradient_predivide_factor
        self._groups = self._groups_of(groups)
        self._group_of = {p: index for index, group in enumerate(self._groups) for p in group}
        self._group_ready = {}
        self._synchronized = False
        self._should_synchronize = True
        self._arena = self._gradient_arena(zero_copy, compression, sparse_as_dense)
        client = _context.current().client
        # An elastic job (epoch > 0) may grow from one rank: hooks always. A
        # rank outside the process set reduces nothing: no hooks, and step()
        # applies its own gradients (as Horovod).
        if not process_set.included():
            return
        if client.size > 1 or process_set is not global_process_set or client.epoch > 0:
            _register_hooks(self)

    def _gradient_arena(self, zero_copy, compression, sparse_as_dense):
        """The arena for this optimizer's CPU gradients, or None: then each
        gradient is copied into the arena and back around its allreduce.
        CUDA gradients are reduced where they are (CUDA IPC)."""
        params = [p for p in self._requires_update if p.device.type == "cpu"]
        if not zero_copy or not params or compression is not Compression.none or sparse_as_dense:
            return None
        client = _context.current().client
        nbytes = sum(p.numel() * p.element_size() for p in params)
        # Half the arena at most: the copy path (broadcasts, other tensors)
        # needs room too.
        if nbytes > client.arena_bytes // 2:
            warnings.warn("gradsync: the gradients (%d bytes) take more than half of the shared arena (%d bytes): "
                          "they are copied instead (raise GRADSYNC_ARENA_BYTES for zero copy)"
                          % (nbytes, client.arena_bytes))
            return None
        try:
            arena = GradientArena(params)
        except GradsyncError as e:
            warnings.warn("gradsync: gradients are copied instead of living in the shared arena: %s" % e)
            return None
        weakref.finalize(self, arena.release)
        return arena

    def _groups_of(self, groups):
        """Parameter groups allreduced together, given as lists of parameters or as a count."""
        if groups is None or groups == 0:
            return []
        if isinstance(groups, int):
            params = self._requires_update
            per = -(-len(params) // groups)
            groups = [params[i:i + per] for i in range(0, len(params), per)]
        groups = [list(g) for g in groups]
        members = [p for g in groups for p in g]
        if len(set(members)) != len(members):
            raise ValueError("A parameter can only appear once in groups.")
        return groups

    def _scales(self):
        if self._op == Average:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _gradient_of(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse and self._sparse_as_dense:
            # A dense copy is reduced; the optimizer gets a sparse gradient
            # back (synchronize), as Horovod.
            return p.grad.to_dense()
        if self._arena is not None and p in self._arena.views:
            # Placed in the arena at its first dense gradient (one copy),
            # where autograd accumulates from then on. A parameter whose
            # gradients are sparse (an embedding) keeps them sparse.
            if p.grad.is_sparse:
                self._arena.forget(p)
            else:
                self._arena.attach(p)
        return p.grad

    def _allreduce_grad_async(self, p):
        prescale, postscale = self._scales()
        gradient = self._gradient_of(p)
        if gradient.is_sparse:  # indices and values allgathered, as Horovod
            if prescale != 1.0 or postscale != 1.0:
                raise ValueError("gradient_predivide_factor is not supported with sparse gradients")
            handle = sparse_allreduce_async(gradient, name=self._parameter_names[p], op=self._op,
                                            process_set=self._process_set)
            return handle, (None, None)
        compressed, ctx = self._compression.compress(gradient)
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=self._op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self._process_set)
        return handle, (compressed, ctx)

    def _grouped_allreduce_async(self, index):
        prescale, postscale = self._scales()
        params = self._groups[index]
        gradients = [self._gradient_of(p) for p in params]
        if any(g.is_sparse for g in gradients):
            raise ValueError("grouped allreduce of sparse gradients: use sparse_as_dense=True or no groups")
        pairs = [self._compression.compress(g) for g in gradients]
        handle = grouped_allreduce_async_([c for c, _ in pairs], name="grouped_allreduce.group%d" % index,
                                          op=self._op, prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self._process_set)
        for p, pair in zip(params, pairs):
            self._handles[p] = (handle, pair)

    def _make_hook(self, p):
        def hook(*_ignored):
            if self._handles.get(p, (None,))[0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] > 0:
                self._handles.setdefault(p, (None, None))
                return
            if p in self._group_of:
                index = self._group_of[p]
                ready = self._group_ready.setdefault(index, set())
                ready.add(p)
                self._handles[p] = (None, None)
                if len(ready) == len(self._groups[index]):
                    self._group_ready.pop(index)
                    self._grouped_allreduce_async(index)
                return
            self._handles[p] = self._allreduce_grad_async(p)

        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hooks did
        not fire, e.g. parameters unused in this step) and writes the results
        into p.grad."""
        single = _context.current().client.size == 1 and self._process_set is global_process_set
        if (single and not self._handles) or not self._process_set.included():
            self._synchronized = True
            return
        for p in self._requires_update:
            if self._handles.get(p, (None,))[0] is None and p not in self._group_of:
                self._handles[p] = self._allreduce_grad_async(p)
        for index, group in enumerate(self._groups):
            if any(self._handles.get(p, (None,))[0] is None for p in group):
                self._group_ready.pop(index, None)
                self._grouped_allreduce_async(index)
        done = {}
        try:
            for p, (handle, (compressed, ctx)) in self._handles.items():
                if handle not in done:
                    done[handle] = _synchronize(handle)
                self._allreduce_delay[p] = self.backward_passes_per_step
                if callable(handle):  # sparse: the result replaces the gradient
                    p.grad = done[handle]
                    continue
                output = self._compression.decompress(compressed, ctx)
                if p.grad.is_sparse:  # sparse_as_dense: reduced dense
                    p.grad = output.to_sparse()
                elif output.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(output)
        except Exception:
            # The step is lost (an elastic job restores its last commit and
            # goes on): end the rest of its allreduces, so the next step
            # starts clean.
            self._drop_handles(done)
            raise
        self._handles.clear()
        self._synchronized = True

    def _drop_handles(self, done):
        for p, (handle, _) in self._handles.items():
            self._allreduce_delay[p] = self.backward_passes_per_step
            if handle is None or handle in done:
                continue
            done[handle] = None
            try:
                _synchronize(handle)
            except Exception:  # noqa: BLE001 - the first error is the one raised
                pass
        self._handles.clear()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside it, step() does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=None):
        held = [p for p in self._requires_update if self._arena is not None and self._arena.holds(p)]
        for p in held:
            p.grad = None
        try:
            return _zero_grad(self, self.__class__, set_to_none)
        finally:
            # Arena gradients stay where they are: zeroed, not dropped.
            for p in held:
                p.grad = self._arena.views[p].zero_()


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Horovod's Adasum optimizer: each parameter's optimizer step runs
    locally as soon as its gradient is ready, and the step's delta (not the
    gradient) is combined across ranks with Adasum; step() applies the
    combined delta to the parameter's value before the local step."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, process_set):
        super(self.__class__, self).__init__(params)
        _setup(self, named_parameters, compression, backward_passes_per_step, process_set)
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for p in self._requires_update}
        _register_hooks(self)

    def _allreduce_delta_async(self, p):
        """The local step for `p` alone, then an Adasum allreduce of its delta."""
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is q for q in group["params"]) else []
        try:
            start.data.copy_(p)
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p)
        handle = allreduce_async_(compressed.data, name=self._parameter_names[p], op=Adasum,
                                  process_set=self._process_set)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*_ignored):
            if self._handles.get(p, (None,))[0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._allreduce_delay[p] -= 1
            handle, ctx = (None, None)
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_delta_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def synchronize(self):
        pass

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # noqa: unreachable (a context manager needs the yield)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes: reduce what there is
                self._handles[p] = self._allreduce_delta_async(p)
        for p, (handle, ctx) in self._handles.items():
            delta = self._compression.decompress(_synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, set_to_none=None):
        return _zero_grad(self, self.__class__, set_to_none)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set, zero_copy_gradients=True):
    """Wraps `optimizer` so that step() applies gradients averaged (or reduced
    with `op`) over the ranks of `process_set`.

    zero_copy_gradients (gradsync's own, on by default): CPU gradients live
    in the shared arena, so the daemon reduces them in place without copies.
    They are copied instead when compressed, densified, or larger than half
    the arena (with a warning). When the optimizer goes away or gradsync shuts
    down, the gradients move to private memory and the arena block is freed.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum and _context.current().client.size > 1:
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, process_set)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense,
               process_set, zero_copy_gradients)
