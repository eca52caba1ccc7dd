# SPDX-License-Identifier: Apache-2.0
"""torch.profiler events of the backend's collectives, as Gloo records them:
one event `gradsync:<operation>` per call, with the input tensors (their
shapes when the profiler records shapes), from the call until the
collective completed.

The event is entered on the caller's thread and ended by whichever thread
completes the Work (the caller's wait(), or the group's completer), before
the Work is marked done: a wait() that returned has seen its event end, so
leaving the profiler right after it never races with the end. The end runs
through a torch Future's callback, which carries the caller's profiler
state (thread-local in torch) to the completing thread."""
import torch

# torch.profiler's names of the operations, as Gloo's ("gloo:all_reduce").
_EVENT_NAMES = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced", "allgather": "all_gather",
                "allgather_coalesced": "all_gather_coalesced", "alltoall": "all_to_all",
                "all_to_all_single": "all_to_all", "recv": "recv", "send": "send"}


def event_name(what):
    """gradsync:<operation> for the call `what` ("gradsync allreduce #3 ...")."""
    kind = what.split(" ")[1]
    return "gradsync:" + _EVENT_NAMES.get(kind, kind)


class CollectiveEvent:
    """One entered event; end() ends it (once), on any thread."""

    def __init__(self, what, inputs):
        self._handle = _enter(event_name(what), [t for t in inputs if isinstance(t, torch.Tensor)])
        self._end = torch.futures.Future()
        # The returned future completes when the event ended; only the
        # callback's side effect is wanted.
        self._ended = torch.ops.profiler._call_end_callbacks_on_jit_fut(self._handle, self._end)

    def end(self):
        if not self._end.done():
            self._end.set_result(None)


def start(what, inputs=()):
    """A CollectiveEvent for the call `what` while torch's profiler
    records, else None (no cost outside profiling)."""
    if not torch.autograd._profiler_enabled():
        return None
    return CollectiveEvent(what, inputs)


def _enter(name, tensors):
    """An entered RecordFunction handle of `name` with `tensors` as its
    inputs (torch's _record_function_with_args_enter); without that entry
    point, one without inputs."""
    with_args = getattr(torch.autograd, "_record_function_with_args_enter", None)
    if with_args is not None:
        return with_args(name, *tensors)
    return torch.ops.profiler._record_function_enter_new(name, None)
