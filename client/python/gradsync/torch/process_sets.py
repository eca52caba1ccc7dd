# SPDX-License-Identifier: Apache-2.0
"""Process sets: collectives among a subset of the ranks (Horovod's API).

Sets are static: they are given to init(process_sets=[...]) on every rank,
in the same order, and get ids 1, 2, ... in that order; id 0 is the global
set of all ranks.
"""
from gradsync.errors import GradsyncError


class ProcessSet:
    """A set of ranks. `process_set_id` is assigned by init()."""

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


def _dynamic_unsupported(*_args, **_kwargs):
    raise NotImplementedError(
        "gradsync supports static process sets only: pass them to init(process_sets=[...]); "
        "adding or removing process sets after init is not implemented by the daemon")


add_process_set = _dynamic_unsupported
remove_process_set = _dynamic_unsupported
