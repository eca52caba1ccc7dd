# SPDX-License-Identifier: Apache-2.0
"""Elastic training state and run loop, with Horovod's names
(horovod.common.elastic).

Differences from Horovod, on purpose:
- commit() is two-phase: save() writes a tentative snapshot, a negotiated
  barrier shows that every rank saved the same step, and only then does it
  replace the committed one. A failure inside commit() leaves every rank
  with its previous committed snapshot, so restore() never mixes steps.
- ObjectState.sync() broadcasts the attributes' current values, as the
  model and optimizer handlers do; Horovod broadcasts the saved ones, so
  counters such as state.batch could roll back while weights did not
  (horovod#3399).
- run() retries only errors marked retriable (a lost rank); a shape
  mismatch or a bad argument escapes at once, where Horovod resets and
  retries until its reset limit.
"""
import enum
import functools

from gradsync.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


class HostUpdateResult(enum.IntFlag):
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class State:
    """State kept across membership changes.

    Args:
        bcast_object: broadcasts a picklable object from rank 0.
        get_rank: returns this process's current rank.
        barrier: negotiated barrier of every rank, for commit(); returns True
            when new ranks were admitted at it (None: commit is one-phase,
            as in Horovod).
    """

    def __init__(self, bcast_object, get_rank, barrier=None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._barrier = barrier
        self._reset_callbacks = []
        self._host_updates = []
        self._in_commit = False

    def register_reset_callbacks(self, callbacks):
        """Functions called after every reset (ranks lost or added), before
        the state is synchronized: e.g. to scale the learning rate."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_updates = []
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        self._host_updates.append((timestamp, update_res))

    def commit(self):
        """Commits the state: a tentative snapshot on every rank, a barrier,
        then the snapshot replaces the previous one. Costs a copy of the
        state; commit less often than every batch for large models."""
        self._in_commit = True
        try:
            self.save()
        finally:
            self._in_commit = False
        admitted = self._barrier() if self._barrier is not None else False
        self._acknowledge()
        if admitted:  # new ranks joined at this commit: every rank syncs them now
            raise HostsUpdatedInterrupt(skip_sync=False)
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt for host updates announced through
        on_hosts_updated. gradsync admits new ranks at commit() instead
        (the daemon says so in the commit barrier's answer, the same on every
        rank), so this runs no collective, unlike Horovod's."""
        if not self._host_updates:
            return
        update = HostUpdateResult.no_update
        for _, result in self._host_updates:
            update |= result
        self._host_updates = []
        raise HostsUpdatedInterrupt(update == HostUpdateResult.removed)

    def _acknowledge(self):
        """Every rank saved: the tentative snapshot becomes the committed one."""

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """Plain Python values given as keyword arguments, kept as attributes."""

    def __init__(self, bcast_object, get_rank, barrier=None, **kwargs):
        self._saved_state = kwargs
        self._pending_state = None
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, barrier=barrier)

    def save(self):
        self._pending_state = {attr: getattr(self, attr) for attr in self._saved_state}
        if not self._in_commit:  # a save() of its own is final at once, as in Horovod
            self._acknowledge()

    def _acknowledge(self):
        if self._pending_state is not None:
            self._saved_state = self._pending_state
            self._pending_state = None

    def restore(self):
        self._pending_state = None
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            current = {attr: getattr(self, attr) for attr in self._saved_state}
            self._saved_state = self._bcast_object(current)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset):
    """The elastic loop around `func(state, ...)`: sync, run; on a
    retriable failure restore the last commit, reset (rejoin) and again."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as error:
                if not getattr(error, "retriable", False):
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            reset()
            state.on_reset()

    return wrapper
