# SPDX-License-Identifier: Apache-2.0
"""The state behind gradsync.torch's module-level API (Horovod's API is
module-level by design): the client of this process and its pending
operations. Everything else in gradsync.torch reaches it through current()."""
import threading
import weakref

from gradsync.errors import GradsyncError


class Context:
    def __init__(self, client, lib, process_sets, cross_rank, cross_size):
        self.client = client
        self.lib = lib
        self.process_sets = process_sets  # id -> ProcessSet, 0 is the global one
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self._lock = threading.Lock()
        self._next_handle = 1
        self._names = {}
        self.pending = {}
        # Names of this rank's collectives not synchronized yet, each with its
        # native handles (under `lock`): a name is free again once its
        # collective has run, synchronized or not (as in Horovod).
        self.in_flight = {}
        self.lock = threading.Lock()
        # Native handles of failed groups whose other members were still in
        # flight: released once they end (they end: the daemon fails or
        # times out the rest of a broken group).
        self.orphans = []
        # DistributedOptimizers' gradient arenas: their gradients leave the
        # arena at shutdown.
        self.gradient_arenas = weakref.WeakSet()

    def start_epoch(self, global_set):
        """An elastic job's new epoch: automatic names start again on every
        rank, process sets other than the global one are gone (they named
        ranks of the old numbering), nothing of the old epoch is in flight."""
        with self._lock:
            self._names.clear()
        with self.lock:
            self.in_flight.clear()
        for process_set_id, process_set in list(self.process_sets.items()):
            if process_set_id != 0:
                process_set._invalidate()
        self.process_sets = {0: global_set}
        global_set._bind(0, self.client.rank, self.client.size)
        self.cross_rank, self.cross_size = 0, 1  # elastic jobs run on one node

    def new_handle(self):
        with self._lock:
            handle = self._next_handle
            self._next_handle += 1
            return handle

    def auto_name(self, kind, process_set_id=0):
        """A name for an unnamed tensor: the ranks of a process set calling in
        the same order agree (counted per set, as ranks outside it skip the call)."""
        with self._lock:
            key = (kind, process_set_id)
            n = self._names.get(key, 0)
            self._names[key] = n + 1
            return "%s.noname.%d" % (kind, n) if process_set_id == 0 else "%s.set%d.noname.%d" % (kind, process_set_id, n)


_current = None


def current():
    if _current is None:
        raise ValueError("gradsync has not been initialized; use gradsync.torch.init().")
    return _current


def is_set():
    return _current is not None


def set_current(context):
    global _current
    if context is not None and _current is not None:
        raise GradsyncError("gradsync.torch is already initialized; call shutdown() first")
    _current = context
