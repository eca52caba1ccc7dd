# SPDX-License-Identifier: Apache-2.0
"""The one exception class of gradsync's Python API."""


class GradsyncError(RuntimeError):
    """A collective or a call to the daemon failed.

    The message is the daemon's: it names the rank, the tensor and what went
    wrong (e.g. ranks disagreeing on a shape). `code` is the gRPC canonical
    status code of the failure (0 when raised by the Python layer itself).
    """

    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code


class MembershipChangedError(GradsyncError):
    """An elastic job's membership changed (a rank was lost) while the
    collective was in flight, or it was started in an epoch that has ended.
    The only retriable error: gradsync.torch.elastic.run restores the last
    commit, rejoins the new epoch and goes on; every other GradsyncError
    (a shape mismatch, a bad argument) escapes it."""

    retriable = True
