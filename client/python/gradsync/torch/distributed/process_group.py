# SPDX-License-Identifier: Apache-2.0
"""ProcessGroupGradsync: a torch.distributed process group whose collectives
run on the node's gradsyncd.

Each process group is a gradsync job of its own (its ranks, its job id and
token agreed through the group's c10d store), so a subgroup forms among its
members alone, as c10d's new_group requires. Collectives are named so that
the names repeat from step to step and numbered in the group's order, which
c10d requires to be every rank's (_names.py): ranks that call different
collectives at one place get the daemon's error saying what differs, on
every rank, instead of a hang."""
import os
import threading

import torch
import torch.distributed as dist

from torch._C._distributed_c10d import Backend as _C10dBackend

from gradsync import _native as native
from gradsync.torch.distributed import _node, _profiler
from gradsync.torch.distributed._monitored import exact_seconds as _exact_seconds, monitored_barrier
from gradsync.torch.distributed._names import CallNames, signature
from gradsync.torch.distributed._p2p import PairChannels
from gradsync.torch._submit import check_tensor
from gradsync.torch.distributed._ops import (copy_chunks, device_output, flat_view, new_op, output_fields, received,
                                             received_splits, reduction, rows)
from gradsync.torch.distributed._work import Completer, DoneWork, Work, _as_runtime_error, _seconds


class _NamesHolder(_C10dBackend):
    """The C++ backend that holds the group's name for c10d (it runs nothing).
    The capabilities c10d asks a backend for are plain attributes here
    (through pybind they would recurse)."""

    supports_coalescing = False
    supports_splitting = False
    options = None

    def getBackendName(self):
        return "gradsync"


def _names_holder(rank, size):
    """A C++ backend for c10d to keep the group's name in. Where pybind gives
    Backend no constructor (PyTorch 2.11 among others), c10d's FakeProcessGroup
    does it, set to raise on any collective: a collective that reached it
    through c10d's dispatcher (functional collectives) would otherwise return
    without running."""
    try:
        return _NamesHolder(rank, size)
    except TypeError as no_constructor:
        fake = getattr(torch._C._distributed_c10d, "FakeProcessGroup", None)
        options = getattr(fake, "Options", None)
        if options is None or not hasattr(options(), "error_on_collective") or not hasattr(fake, "_create_internal"):
            raise RuntimeError("gradsync backend: PyTorch %s gives c10d's Backend no Python constructor (%s) and has "
                               "no FakeProcessGroup that raises on collectives to hold the group's name"
                               % (torch.__version__, no_constructor)) from None
        opts = options()
        opts.error_on_collective = True
        return fake._create_internal(rank, size, opts)


class ProcessGroupGradsync(dist.ProcessGroup):
    """The `gradsync` backend of one process group (see the module's doc)."""

    def __init__(self, store, rank, size, timeout, node_daemon, node_key, owns_daemon):
        super().__init__(rank, size)
        # c10d keeps a group's name and devices in its C++ backends: a plain
        # one per device holds them (the collectives are this class's).
        self._names_holder = _names_holder(rank, size)
        for device in ("cpu", "cuda"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self._names_holder)
        self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        self._timeout = timeout.total_seconds()
        self._node_daemon = node_daemon
        self._owns_daemon = owns_daemon
        what = "gradsync process group (rank %d of %d)" % (rank, size)
        self.store = store  # the group's c10d store (what the ranks agreed is under gradsync/)
        job_id, token = _node.agree_job(store, rank, self._timeout, os.environ, what + ": its job id")
        local_rank, local_size = _node.place_in_node(store, node_key, rank, size, self._timeout,
                                                     what + ": every rank's arrival")
        leader = _node.agree_leader(store, rank, node_daemon, self._timeout, what + ": its leader's address")
        if owns_daemon:
            node_daemon.learn_local_size(local_size)
        self._lib = native.load_library()
        config = native.new_config(self._lib)
        config.socket_path = node_daemon.socket_path.encode()
        config.job_id = job_id.encode()
        config.token = token.encode()
        config.rank, config.world_size = rank, size
        config.local_rank, config.local_size = local_rank, local_size
        config.connect_timeout_seconds = self._timeout
        self.job_id = job_id
        # Empty on one node: a GRADSYNC_LEADER meant for another job is not this group's.
        config.leader_address = (leader if local_size < size else "").encode()
        self._client = native.Client(self._lib, config)
        self._completer = Completer(job_id, self._timeout)
        self._pairs = PairChannels(store, rank, size, job_id, token, node_daemon, node_key, self._timeout)
        self._names = CallNames()
        self._lock = threading.Lock()
        self._coalesced = None  # Works since start_coalescing, or None
        self._latest = None  # the last Work, until the next collective hands it over if not done
        self._closed = False
        self._monitored = 0  # monitored barriers so far

    # --- identity -------------------------------------------------------
    def getBackendName(self):
        return "gradsync"

    def __repr__(self):
        return "ProcessGroupGradsync(job=%s, rank=%d, size=%d)" % (self.job_id, self.rank(), self.size())

    # --- the collectives c10d and DDP call ------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        if any(t.is_sparse for t in tensors):
            return self._sparse_allreduce(tensors, opts)
        return self._in_place("allreduce", native.ALLREDUCE, tensors, opts, reduction=True)

    def _sparse_allreduce(self, tensors, opts):
        """The sum of sparse COO tensors (Gloo's sparse allreduce): every
        rank's indices and values are gathered (padded to the largest
        count), and each rank sums them into its tensor. Returns when done."""
        what = self._what("allreduce (sparse)")
        if len(tensors) != 1 or opts.reduceOp != dist.ReduceOp.SUM:
            raise ValueError("%s: sparse tensors are summed one at a time (ReduceOp.SUM), not %d with %s" % (
                what, len(tensors), opts.reduceOp))
        tensor = tensors[0]
        coalesced = tensor.coalesce()
        indices = coalesced.indices().t().contiguous()  # [nnz, sparse dims]
        values = coalesced.values().contiguous()  # [nnz, dense dims...]
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size())]
        self.allgather([counts], [torch.tensor([indices.shape[0]], dtype=torch.int64)]).wait()
        counts = [int(c) for c in counts]
        top = max(counts)

        def gathered(rows):
            padded = torch.zeros((top,) + tuple(rows.shape[1:]), dtype=rows.dtype)
            padded[:rows.shape[0]] = rows
            every = [torch.empty_like(padded) for _ in range(self.size())]
            self.allgather([every], [padded]).wait()
            return torch.cat([part[:n] for part, n in zip(every, counts)])
        total = torch.sparse_coo_tensor(gathered(indices).t(), gathered(values), tensor.shape).coalesce()
        tensor.copy_(total)
        return DoneWork(what, [tensor])

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._in_place("allreduce_coalesced", native.ALLREDUCE, tensors, opts, reduction=True)

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        return self._in_place("broadcast", native.BROADCAST, tensors, opts, root_rank=opts.rootRank)

    def reduce(self, tensors, opts=None):
        """An allreduce whose result only the root keeps (the others' tensors
        are left as they were)."""
        opts = opts if opts is not None else dist.ReduceOptions()
        staged = [t if self.rank() == opts.rootRank else t.clone() for t in tensors]
        return self._in_place("reduce", native.ALLREDUCE, staged, opts, reduction=True)

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._gather_lists("allgather", output_tensors, input_tensors)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """c10d hands the outputs rank by rank (output_lists[rank][input]);
        each input's allgather fills its column."""
        per_input = [[outs[i] for outs in output_lists if i < len(outs)] for i in range(len(input_tensors))]
        return self._gather_lists("allgather_coalesced", per_input, input_tensors, work_outputs=output_lists)

    def all_gather_single(self, output, input, opts=None):
        return self._gather_into("all_gather_into_tensor", [output], [input])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._gather_into("all_gather_into_tensor_coalesced", outputs, inputs)

    def gather(self, output_tensors, input_tensors, opts=None):
        """An allgather whose result only the root keeps."""
        root = opts.rootRank if opts is not None else 0
        outputs = output_tensors if self.rank() == root else [[torch.empty_like(input_tensors[0])
                                                                for _ in range(self.size())]]
        return self._gather_lists("gather", outputs, input_tensors)

    def gather_single(self, output, input, opts=None):
        root = opts.rootRank if opts is not None else 0
        target = output if self.rank() == root else torch.empty((self.size(),) + tuple(input.shape),
                                                                dtype=input.dtype, device=input.device)
        return self._gather_into("gather_into_tensor", [target], [input])

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        inputs = [torch.cat([t.reshape(-1) for t in chunks]) if chunks else torch.empty(0, dtype=out.dtype)
                  for out, chunks in zip(output_tensors, input_lists)]
        return self._scatter_reduce("reduce_scatter", output_tensors, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._scatter_reduce("reduce_scatter_tensor", [output], [input], opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._scatter_reduce("reduce_scatter_tensor_coalesced", outputs, inputs, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        what = self._what("alltoall")
        source = torch.cat([t.reshape(-1) for t in input_tensors]) if input_tensors else torch.empty(0)
        splits = [t.numel() for t in input_tensors]

        def finish(result, view):
            copy_chunks(view, output_tensors, what)
        return self._exchange(what, source, splits, sum(t.numel() for t in output_tensors), output_tensors, finish,
                              input_tensors)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        what = self._what("all_to_all_single")
        row = rows(input)
        first = input.shape[0] if input.dim() else 1
        if input_split_sizes:
            splits = [s * row for s in input_split_sizes]
        elif first % self.size() == 0:
            splits = [first // self.size() * row] * self.size()
        else:
            return self._refuse(what, native.ALLTOALL, ValueError(
                "%s: the input's %d rows cannot be split evenly among %d ranks" % (what, first, self.size())),
                self._names.next("alltoall", [signature(input, with_count=False)]))

        def finish(result, view):
            got = received_splits(result)
            if output_split_sizes and [g // max(1, rows(output)) for g in got] != list(output_split_sizes):
                raise RuntimeError("%s: received rows %s from the ranks, output_split_sizes says %s" % (
                    what, [g // max(1, rows(output)) for g in got], list(output_split_sizes)))
            copy_chunks(view, [output], what)
        flat, _ = flat_view(input)
        return self._exchange(what, flat, splits, output.numel(), [output], finish, [input])

    def scatter(self, output_tensors, input_lists, opts=None):
        """An alltoall in which only the root sends: rank i gets its piece."""
        root = opts.rootRank if opts is not None else 0
        what = self._what("scatter")
        out = output_tensors[0]
        if self.rank() == root:
            source = torch.cat([t.reshape(-1) for t in input_lists[0]])
            splits = [t.numel() for t in input_lists[0]]
        else:
            source = torch.empty(0, dtype=out.dtype, device=out.device)
            splits = [0] * self.size()

        def finish(result, view):
            copy_chunks(view, [out], what)
        return self._exchange(what, source, splits, out.numel(), output_tensors, finish,
                              input_lists[0] if self.rank() == root else [])

    def barrier(self, opts=None):
        what = self._what("barrier")
        [(name, call)] = self._names.next("barrier", ["none"])
        keep = []
        op = new_op(self._lib, native.BARRIER, name, torch.empty(0, dtype=torch.uint8), keep, call=call)
        timeout = _seconds(opts.timeout) if opts is not None and hasattr(opts, "timeout") else None
        return self._enqueue(what, [op], keep, [], lambda results: None, timeout=timeout)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """c10d's monitored barrier: rank 0 waits for every other rank (up
        to `timeout`, which may be 0) and names the first that did not come,
        or all of them (`wait_all_ranks`); the others learn from rank 0 how
        it ended. Through the group's c10d store, apart from the daemon (a
        debugging aid for ranks out of step: it must not wait behind their
        collectives)."""
        self._monitored += 1
        seconds = self._timeout if timeout is None else _exact_seconds(timeout)
        monitored_barrier(self.store, "gradsync/monitored_barrier/%d/" % self._monitored, self.rank(),
                          self.size(), seconds, wait_all_ranks)

    def send(self, tensors, dst, tag=0):
        return self._point_to_point("send to", tensors, dst, tag, sending=True)

    def recv(self, tensors, src, tag=0):
        return self._point_to_point("recv from", tensors, src, tag, sending=False)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("gradsync: recv from any source is not supported (group %s): name the sender" %
                           self.job_id)

    # c10d's older names of the same operations (torch before 2.12).
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single

    # --- coalescing (c10d's _coalescing_manager) -------------------------
    def start_coalescing(self, device=None):
        self._coalesced = []

    def end_coalescing(self, device=None):
        works, self._coalesced = self._coalesced or [], None
        return _all_of(self._what("coalesced"), works, self._timeout)

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    # --- lifetime --------------------------------------------------------
    def shutdown(self):
        """Leaves the job (destroy_process_group); operations in flight fail."""
        if self._closed:
            return
        self._closed = True
        try:
            self._pairs.shutdown()
            self._client.shutdown()
        finally:
            self._completer.stop()
            if self._owns_daemon:
                self._node_daemon.leave()

    def abort(self):
        self.shutdown()

    # --- helpers ---------------------------------------------------------
    def _what(self, op):
        return "gradsync %s #%d (rank %d of %d, job %s)" % (op, self._names.calls + 1, self.rank(), self.size(),
                                                            self.job_id)

    def _in_place(self, kind, collective, tensors, opts, reduction=False, **fields):
        """Allreduce / broadcast of each tensor in place (a group when several)."""
        what = self._what(kind)
        calls = self._names.next(kind, [signature(t) for t in tensors])
        try:
            if reduction:
                fields["reduce_op"], fields["prescale"] = _reduction_of(opts)
            keep, ops, copies = [], [], []
            for (name, call), tensor in zip(calls, tensors):
                check_tensor(tensor, what)
                flat, copied = flat_view(tensor)
                if copied:
                    copies.append((tensor, flat))
                ops.append(new_op(self._lib, collective, name, flat, keep, call=call, **fields))
        except (ValueError, TypeError) as error:
            return self._refuse(what, collective, error, calls)

        def finish(results):
            for tensor, flat in copies:
                tensor.copy_(flat.view(tensor.shape))
        return self._enqueue(what, ops, keep, tensors, finish, inputs=tensors)

    def _gather_lists(self, kind, output_lists, input_tensors, work_outputs=None):
        """allgather of each input into its list of outputs (one per rank, or
        one flat tensor of them all), which must hold the ranks' inputs;
        `work_outputs`: the Work's value, when not `output_lists`."""
        what = self._what(kind)
        calls = self._names.next(kind, [signature(t) for t in input_tensors])
        keep, ops, targets = [], [], []
        try:
            for (name, call), tensor, outs in zip(calls, input_tensors, output_lists):
                check_tensor(tensor, what)
                holds = sum(o.numel() for o in outs)
                if holds != tensor.numel() * self.size():
                    raise ValueError("%s: the output holds %d elements, not %d ranks x %d" % (
                        what, holds, self.size(), tensor.numel()))
                targets.append(device_output(tensor, holds, keep))
                ops.append(new_op(self._lib, native.ALLGATHER, name, flat_view(tensor)[0], keep, call=call,
                                  **output_fields(targets[-1])))
        except (ValueError, TypeError) as error:
            return self._refuse(what, native.ALLGATHER, error, calls)

        def finish(results):
            for result, outs, tensor, target in zip(results, output_lists, input_tensors, targets):
                copy_chunks(received(result, target, tensor.dtype, what, sum(o.numel() for o in outs)), outs, what)
        return self._enqueue(what, ops, keep, output_lists if work_outputs is None else work_outputs, finish,
                             inputs=input_tensors)

    def _gather_into(self, kind, outputs, inputs):
        """allgather of each input into one flat output tensor."""
        return self._gather_lists(kind, [[out] for out in outputs], inputs, work_outputs=outputs)

    def _scatter_reduce(self, kind, outputs, inputs, opts):
        """reducescatter of each flat input; rank i keeps the i-th piece."""
        what = self._what(kind)
        calls = self._names.next(kind, [signature(t) for t in inputs])
        keep, ops, targets = [], [], []
        try:
            reduce_op, prescale = _reduction_of(opts)
            for (name, call), out, tensor in zip(calls, outputs, inputs):
                check_tensor(tensor, what)
                if tensor.numel() != out.numel() * self.size():
                    raise ValueError("%s: the input holds %d elements, not %d ranks x %d" % (
                        what, tensor.numel(), self.size(), out.numel()))
                targets.append(device_output(tensor, out.numel(), keep))
                ops.append(new_op(self._lib, native.REDUCESCATTER, name, flat_view(tensor)[0], keep, call=call,
                                  reduce_op=reduce_op, prescale=prescale, **output_fields(targets[-1])))
        except (ValueError, TypeError) as error:
            return self._refuse(what, native.REDUCESCATTER, error, calls)

        def finish(results):
            for result, out, target in zip(results, outputs, targets):
                copy_chunks(received(result, target, out.dtype, what, out.numel()), [out], what)
        return self._enqueue(what, ops, keep, outputs, finish, inputs=inputs)

    def _exchange(self, what, source, splits, expected, outputs, finish_view, inputs):
        """An alltoall of the flat `source` with element `splits` (the ranks'
        element counts may differ: the name has the dtype alone); `inputs`:
        the call's input tensors."""
        [(name, call)] = self._names.next("alltoall", [signature(source, with_count=False)])
        keep = []
        try:
            check_tensor(source, what)
            if len(splits) != self.size() or sum(splits) != source.numel():
                raise ValueError("%s: splits %s do not cover the input's %d elements among %d ranks" % (
                    what, splits, source.numel(), self.size()))
            target = device_output(source, expected, keep)
            op = new_op(self._lib, native.ALLTOALL, name, source, keep, splits=splits, call=call,
                        **output_fields(target))
        except (ValueError, TypeError) as error:
            return self._refuse(what, native.ALLTOALL, error, [(name, call)])

        def finish(results):
            finish_view(results[0], received(results[0], target, source.dtype, what, expected))
        return self._enqueue(what, [op], keep, outputs, finish, inputs=inputs)

    def _enqueue(self, what, ops, keep, outputs, finish, client=None, timeout=None, inputs=()):
        """Starts `ops` on `client` (the group's unless given) and returns
        their Work; `finish(results)` copies the outputs once they completed.
        `timeout`: the call's own, in seconds (else the group's); `inputs`:
        the call's input tensors (the profiler's event records them)."""
        if self._closed:
            raise RuntimeError("%s: the process group was shut down" % what)
        own = client is None  # the group's calls (a pair's keep names of their own)
        client = client or self._client
        names = [op.name for op in ops] if own else []
        self._names.wait_until_free(names, self._timeout, what)
        event = _profiler.start(what, inputs)
        try:
            # Several allreduces are negotiated as one group; other kinds
            # (a coalesced allgather) go one by one, in the same order on
            # every rank.
            grouped = len(ops) > 1 and all(op.collective == native.ALLREDUCE for op in ops)
            natives = client.enqueue_group(ops, what) if grouped else [client.enqueue(op, what) for op in ops]
        except Exception as error:
            if event is not None:
                event.end()
            raise _as_runtime_error(error, what) from None

        def finish_keeping(results):
            finish(results)
            keep.clear()
        work = Work(what, outputs, timeout or self._timeout, client, natives, finish_keeping,
                    self._completer if natives else None, event=event)
        if not natives:
            work._finish()
        elif own:
            self._names.hold(names, work)
        self._hand_over_earlier(work)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _point_to_point(self, kind, tensors, peer, tag, sending):
        what = "gradsync %s rank %d, tag %d (rank %d of %d, job %s)" % (kind, peer, tag, self.rank(), self.size(),
                                                                        self.job_id)
        if len(tensors) != 1:
            raise ValueError("%s: one tensor per message, not %d" % (what, len(tensors)))
        client, op, keep = self._pairs.message(tensors[0], peer, tag, sending, what)
        return self._enqueue(what, [op], keep, tensors, lambda results: keep.clear(), client=client, inputs=tensors)

    def _hand_over_earlier(self, latest):
        """Earlier collectives of the group not done yet go to the completer
        (so that each completes, in order, whether or not anyone waits)."""
        with self._lock:
            earlier, self._latest = self._latest, latest
        if earlier is not None and not earlier._done.is_set():
            earlier._hand_over()

    def _refuse(self, what, collective, error, calls):
        """This rank's arguments are wrong: it still takes part without data,
        so the other ranks fail at once naming it, and raises."""
        for name, call in calls:
            op = native.new_op(self._lib)
            op.collective = collective
            op.name = name.encode()
            op.call = call
            try:
                self._completer.add(None, [self._client.abandon(op, str(error))], self._client)
            except Exception:
                pass  # a broken client: the others learn it from the daemon
        raise error


def _reduction_of(opts):
    return reduction(opts.reduceOp)


def _all_of(what, works, timeout):
    """A Work that completes when all `works` have (with the first error)."""
    if not works:
        return DoneWork(what, [])
    combined = Work(what, [t for w in works for t in (w._outputs or [])], timeout)
    left = [len(works)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            left[0] -= 1
            if left[0]:
                return
        errors = [w.exception() for w in works if w.exception() is not None]
        combined._finish(errors[0] if errors else None)
    for w in works:
        w.get_future().add_done_callback(one_done)
    return combined
