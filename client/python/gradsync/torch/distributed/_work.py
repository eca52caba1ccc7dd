# SPDX-License-Identifier: Apache-2.0
"""c10d Work objects of the gradsync backend, and the one thread per process
group that completes them in order.

A collective is enqueued on the daemon at the call (DDP's bucket starts as
soon as DDP hands it over); the completer waits for the daemon's answer,
copies outputs into the caller's tensors and completes the Work and its
Future, whose callbacks (DDP's, a comm hook's) then run on that thread."""
import concurrent.futures
import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist

from gradsync.errors import GradsyncError


def _seconds(timeout):
    """A c10d timeout (timedelta, milliseconds from C++, None) in seconds;
    None for none given: c10d's kNoTimeout (0, Work.wait's default, what
    C++ callers pass) and kUnsetTimeout (-1, an option left unset)."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    else:
        seconds = float(timeout) / 1000.0
    return seconds if seconds > 0 else None


def timed_out(what, seconds, cause):
    """c10d's wording for a timeout ("Timed out waiting 1000ms for ..."),
    which code and tests that handle c10d's timeouts match."""
    return dist.DistBackendError("gradsync: %s: Timed out waiting %dms for %s" % (what, round(seconds * 1000), cause))


class Work(dist.Work):
    """One collective of the backend: wait(timeout), is_completed(),
    get_future() (its value: the output tensors, as DDP's hooks expect).

    One thread waits for the daemon's answer and copies the outputs: the
    caller of wait() when it comes first (a synchronous collective then
    costs no thread handoff), else the group's completer thread; the other
    waits for it. A Work reaches the completer only when something needs it
    to complete by itself (get_future(), is_completed(), a later collective
    of the group while it is not done): a synchronous collective never
    wakes that thread."""

    def __init__(self, what, outputs, default_timeout, client=None, natives=(), finish=None, completer=None,
                 event=None):
        super().__init__()
        self.what = what
        self._outputs = outputs
        self._default_timeout = default_timeout
        self._client = client
        self._natives = natives
        self._finish_outputs = finish
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error = None
        self._base = None  # made by get_future()
        self._future = None
        self._waiter = None  # "caller" or "completer": the thread that waits for the daemon
        self._completer = completer  # None once handed over (or never to be)
        self._event = event  # the profiler's event (_profiler.CollectiveEvent), ended when done

    def _hand_over(self):
        """Lets the completer complete this Work (once)."""
        with self._lock:
            completer, self._completer = self._completer, None
        if completer is not None:
            completer.add(self, self._natives)

    def _claim(self, who):
        """True when `who` is (now) the one to wait for the daemon."""
        with self._lock:
            if self._waiter is None:
                self._waiter = who
            return self._waiter == who

    def _finish(self, error=None):
        self._mark(error)
        self._deliver()

    def _mark(self, error=None):
        with self._lock:
            if self._done.is_set():
                return
            self._error = error
            self._end_event()
            self._done.set()

    def _end_event(self):
        """Ends the profiler's event, if any, before the Work is marked done."""
        event, self._event = self._event, None
        if event is not None:
            event.end()

    def _complete(self, error=None):
        """The daemon answered (`error`: how it failed, if it did): copies
        the outputs unless that was done already."""
        with self._lock:
            if self._done.is_set():
                return
            if error is None:
                try:
                    self._finish_outputs([self._client.result(n) for n in self._natives])
                except Exception as failure:  # completes the Work with it
                    error = _as_runtime_error(failure, self.what)
            self._error = error
            self._end_event()
            self._done.set()

    def _deliver(self):
        """Completes the Future, if anyone asked for it: its callbacks run here."""
        with self._lock:
            base = self._base
        if base is not None and not base.done():
            try:
                base.set_result(self._outputs if self._error is None else _Failure(self._error))
            except RuntimeError:
                pass  # get_future() on another thread completed it first

    def wait(self, timeout=None):
        """Waits up to `timeout` (none given: the timeout of the call, else
        of the process group) in all, whoever waits for the daemon."""
        seconds = _seconds(timeout)
        if seconds is None:
            seconds = self._default_timeout if self._default_timeout is not None else 0.0  # (done at the call)
        deadline = time.monotonic() + seconds
        if not self._done.is_set() and self._client is not None and self._claim("caller"):
            self._wait_here(deadline)
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            raise timed_out(self.what, seconds, "it to complete (Work.wait)")
        if self._error is not None:
            raise self._error
        return True

    def _wait_here(self, deadline):
        """Waits for the daemon's answer on the caller's thread until
        `deadline` (time.monotonic())."""
        try:
            for n in self._natives:
                while not self._client.wait_for(n, min(0.5, max(0.0, deadline - time.monotonic()))):
                    if time.monotonic() >= deadline:
                        with self._lock:
                            self._waiter = None  # the completer takes over
                        return
                self._client.wait(n, self.what)
        except Exception as error:
            self._complete(_as_runtime_error(error, self.what))
        else:
            self._complete()
        with self._lock:
            release = self._completer is not None  # never handed over: nobody else will
            self._completer = None
        if release:
            for n in self._natives:
                try:
                    self._client.release(n)
                except Exception:
                    pass  # closed client: nothing left to release

    def is_completed(self):
        if not self._done.is_set():
            self._hand_over()
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        # The Future callers see is a continuation of this one, so that an
        # error reaches C++ consumers (DDP's reducer) as the future's error:
        # Future.set_exception would hand them the exception as a value.
        with self._lock:
            if self._base is None:
                self._base = torch.futures.Future()
                self._future = self._base.then(_value_or_raise)
            done = self._done.is_set()
        if done:
            self._deliver()
        else:
            self._hand_over()
        return self._future

    def result(self):
        self.wait()
        return self._outputs

    def synchronize(self):
        self.wait()

    def source_rank(self):
        return -1


class DoneWork(Work):
    """A Work that completed at the call (nothing to move, or an error)."""

    def __init__(self, what, outputs, error=None):
        super().__init__(what, outputs, None)
        self._finish(error)


class Completer:
    """Waits for each Work handed to it, in order, and completes it (a Work's
    own client: the group's, or a point-to-point pair's). `timeout_seconds`
    bounds each wait beyond the daemon's own stall deadline: an operation
    past it fails naming it, and its native handle is released once the
    daemon answers."""

    def __init__(self, name, timeout_seconds):
        self._timeout = timeout_seconds
        self._queue = queue.Queue()
        self._late = []  # (client, native handle) of operations not done when released
        # Futures complete on other threads than this one: a callback may wait
        # for a later collective of the group (PowerSGD's hook does), which
        # this thread must still be free to complete.
        self._delivery = concurrent.futures.ThreadPoolExecutor(max_workers=4,
                                                               thread_name_prefix="gradsync-c10d-%s-done" % name)
        self._thread = threading.Thread(target=self._run, name="gradsync-c10d-%s" % name, daemon=True)
        self._thread.start()

    def add(self, work, natives, client=None):
        """Completes `work` once all `natives` completed. No `work`: only
        releases the handles (of `client`) once the daemon answered."""
        self._queue.put((work, natives, client if work is None else work._client))

    def stop(self):
        self._queue.put(None)
        self._thread.join(timeout=self._timeout + 5)
        self._delivery.shutdown(wait=False)

    def _run(self):
        """Completes the Works handed over as each finishes, in any order (a
        recv waiting for its sender must not hold back the group's other
        collectives): waits on the oldest, briefly when others wait too."""
        pending = []  # [work, natives, client, deadline]
        while True:
            try:
                while True:
                    item = self._queue.get(block=not pending, timeout=None)
                    if item is None:
                        return
                    work, natives, client = item
                    if work is None:
                        self._release(client, natives)
                    else:
                        pending.append([work, natives, client, time.monotonic() + work._default_timeout])
                    if self._queue.empty():
                        break
            except queue.Empty:
                pass
            pending = [p for p in pending if not self._try_complete(*p)]
            if pending:
                self._wait_briefly(pending[0], 0.05 if len(pending) == 1 else 0.002)

    def _try_complete(self, work, natives, client, deadline):
        """Completes `work` when it is done (by its caller, or per the
        daemon); True when it is finished with."""
        try:
            if not work._done.is_set():
                if not work._claim("completer"):
                    return False  # its caller waits for the daemon
                if not all(client.poll(n) for n in natives):
                    if time.monotonic() < deadline:
                        return False
                    raise timed_out(work.what, work._default_timeout, "the daemon's answer (the call's timeout)")
                for n in natives:
                    client.wait(n, work.what)  # done: raises its error, if any
                work._complete()
        except Exception as error:  # completes the Work with it
            work._complete(_as_runtime_error(error, work.what))
        self._delivery.submit(work._deliver)
        self._release(client, natives)
        return True

    def _wait_briefly(self, entry, seconds):
        work, natives, client, _ = entry
        if work._waiter == "caller":
            work._done.wait(seconds)
            return
        for n in natives:
            try:
                if not client.wait_for(n, seconds):
                    return
            except GradsyncError:
                return  # its error is raised when it is completed

    def _release(self, client, natives):
        still = []
        for c, n in self._late + [(client, n) for n in natives]:
            try:
                if c.poll(n):
                    c.release(n)
                else:
                    still.append((c, n))
            except GradsyncError:
                pass  # unknown (released already) or a closed client: nothing left to release
        self._late = still


class _Failure:
    def __init__(self, error):
        self.error = error


def _value_or_raise(future):
    value = future.value()
    if isinstance(value, _Failure):
        raise value.error.with_traceback(None)  # the daemon's cause, not the completer's stack
    return value


def _as_runtime_error(error, what):
    """c10d callers catch RuntimeError (DistBackendError is one)."""
    if isinstance(error, RuntimeError):
        return error
    text = str(error)
    return dist.DistBackendError(text if what in text else "%s: %s" % (what, text))
