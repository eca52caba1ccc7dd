# SPDX-License-Identifier: Apache-2.0
"""Horovod's exceptions (horovod.common.exceptions)."""
from gradsync.errors import GradsyncError, MembershipChangedError

# Every failed collective raises a GradsyncError, which is Horovod's
# HorovodInternalError; of those, elastic.run retries only the retriable
# MembershipChangedError (Horovod retries them all, a shape mismatch too).
HorovodInternalError = GradsyncError


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed: every rank leaves its training function
    at the same step and rejoins (skip_sync: the state need not be
    broadcast, as when ranks were only removed)."""

    def __init__(self, skip_sync):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "MembershipChangedError"]
