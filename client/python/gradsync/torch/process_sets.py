# SPDX-License-Identifier: Apache-2.0
"""Process sets: collectives among a subset of the ranks (Horovod's API).

Static sets are given to init(process_sets=[...]) on every rank, in the same
order, and get ids 1, 2, ... in that order; id 0 is the global set of all
ranks. add_process_set() and remove_process_set() change the sets at any
time after init: collective calls of every rank of the job, in the same
order on each (no HOROVOD_DYNAMIC_PROCESS_SETS needed). The daemon numbers
added sets after the static ones and never reuses an id.
"""
from gradsync import _native as native
from gradsync.errors import GradsyncError
from gradsync.torch import _context

# Codes of errors the caller's own arguments caused: Horovod raises ValueError.
_ARGUMENT_CODES = (native.INVALID_ARGUMENT, native.NOT_FOUND, native.ALREADY_EXISTS)


class ProcessSet:
    """A set of ranks. `process_set_id` is assigned by init() or add_process_set()."""

    def __init__(self, ranks):
        ranks = sorted(int(r) for r in ranks)
        if len(set(ranks)) != len(ranks):
            raise ValueError("process set ranks must be distinct: %s" % ranks)
        self.ranks = ranks
        self.process_set_id = None
        self._my_rank = None

    def _bind(self, process_set_id, my_rank, world_size):
        if self.ranks and (self.ranks[0] < 0 or self.ranks[-1] >= world_size):
            raise GradsyncError("process set %s has ranks outside [0, %d)" % (self.ranks, world_size))
        self.process_set_id = process_set_id
        self._my_rank = my_rank

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks in the set (None before init)."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This process's index within the set, or -1 when it is not a member."""
        if self.process_set_id is None:
            return None
        return self.ranks.index(self._my_rank) if self._my_rank in self.ranks else -1

    def included(self):
        return self.process_set_id is not None and self._my_rank in self.ranks

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        super().__init__([])

    def _bind(self, process_set_id, my_rank, world_size):
        self.ranks = list(range(world_size))
        self.process_set_id = 0
        self._my_rank = my_rank

    def included(self):
        return self.process_set_id is not None  # every rank, without searching the list on every op


global_process_set = _GlobalProcessSet()


def _argument_error(error):
    return ValueError(str(error)) if getattr(error, "code", 0) in _ARGUMENT_CODES else error


def add_process_set(process_set):
    """Adds a process set (a ProcessSet or a list of ranks) and returns it
    with its id: a collective call of every rank of the job. ValueError
    when a set with the same ranks exists or a rank is out of range; the
    other ranks' calls then fail at once too, naming this rank."""
    ctx = _context.current()
    ranks = process_set.ranks if isinstance(process_set, ProcessSet) else sorted(int(r) for r in process_set)
    try:
        new_id = ctx.client.add_process_set(ranks)
    except GradsyncError as error:
        raise _argument_error(error) from None
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(ranks)
    process_set._bind(new_id, ctx.client.rank, ctx.client.size)
    ctx.process_sets[new_id] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a process set added before (a collective call of every rank)
    and invalidates the object. Returns False, as Horovod, for a set that
    was never added or is the global one; collectives of the set still
    waiting for ranks fail, naming the removal."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    ctx = _context.current()
    process_set._invalidate()
    ctx.process_sets.pop(process_set_id, None)
    try:
        ctx.client.remove_process_set(process_set_id)
    except GradsyncError as error:
        if getattr(error, "code", 0) == native.NOT_FOUND:
            return False
        raise
    return True
