# SPDX-License-Identifier: Apache-2.0
"""c10d's monitored barrier over a group's c10d store: rank 0 waits for the
others and names who did not come, in c10d's words (tests and tools match
"Rank 1 failed to pass monitoredBarrier")."""
import datetime
import time

import torch.distributed as dist


def exact_seconds(timeout):
    """A timeout (timedelta, or seconds) in seconds; 0 stays 0."""
    if isinstance(timeout, datetime.timedelta):
        return max(0.0, timeout.total_seconds())
    return max(0.0, float(timeout))


def _arrived(store, key, seconds):
    """True once `key` is in the store, within `seconds` (checked at least once)."""
    deadline = time.monotonic() + seconds
    while True:
        if store.check([key]):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.01, left))


def monitored_barrier(store, prefix, rank, size, seconds, wait_all_ranks):
    """Rank 0 waits up to `seconds` in all for ranks 1..size-1 (the first
    missing one ends it, unless `wait_all_ranks`) and raises naming the
    missing; every other rank waits for rank 0's verdict and raises with
    it. Keys live under `prefix` (one per barrier)."""
    ms = int(round(seconds * 1000))
    reached = "Rank %d successfully reached monitoredBarrier, but received errors while waiting for send/recv " \
              "from rank 0" % rank
    if rank != 0:
        store.set(prefix + "arrived/%d" % rank, b"1")
        # Rank 0 decides within `seconds` of its own arrival: wait past that.
        if not _arrived(store, prefix + "result", seconds + max(1.0, seconds)):
            raise dist.DistBackendError("%s: Timed out waiting %dms for rank 0's verdict" % (reached, ms))
        verdict = store.get(prefix + "result").decode()
        if verdict != "ok":
            raise dist.DistBackendError("%s: %s" % (reached, verdict))
        return
    deadline = time.monotonic() + seconds
    missing = []
    failure = None
    for other in range(1, size):
        key = prefix + "arrived/%d" % other
        left = deadline - time.monotonic()
        if store.check([key]):
            continue
        if left <= 0 and not wait_all_ranks:
            failure = "[Rank 0]: Rank 0 timed out in monitoredBarrier after %d ms (rank %d had not arrived)" % (
                ms, other)
            break
        if not _arrived(store, key, max(0.0, left)):
            missing.append(other)
            if not wait_all_ranks:
                break
    if missing and wait_all_ranks:
        failure = "[Rank 0]: Ranks %s failed to pass monitoredBarrier in %d ms" % (", ".join(map(str, missing)), ms)
    elif missing:
        failure = "[Rank 0]: Rank %d failed to pass monitoredBarrier in %d ms" % (missing[0], ms)
    store.set(prefix + "result", (failure or "ok").encode())
    if failure:
        raise dist.DistBackendError(failure)
