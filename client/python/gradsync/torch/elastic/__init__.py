# SPDX-License-Identifier: Apache-2.0
"""Elastic training (Horovod's hvd.elastic): the job goes on when ranks are
lost, from the last commit.

Run the job with `gradsyncrun --min-np N` (or GRADSYNC_ELASTIC=1 and
GRADSYNC_MIN_SIZE=N). When a rank dies, the daemon moves the job to a new
epoch with the survivors (renumbered in their old order); their collectives
in flight fail with a retriable MembershipChangedError; run() restores the
last commit, rejoins (no reconnection: the client stays connected and takes
its new rank and size), calls the reset callbacks, broadcasts the state
from the new rank 0 and calls the training function again.

Not yet: ranks or hosts joining a running job (so no HostsUpdatedInterrupt
is ever raised), elastic jobs across daemons. Outside an elastic job, run()
syncs once and calls the function, as Horovod does.
"""
import os

from gradsync.common.elastic import HostUpdateResult, ObjectState, State, run_fn
from gradsync.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from gradsync.errors import MembershipChangedError
from gradsync.torch import basics
from gradsync.torch.elastic.sampler import ElasticSampler
from gradsync.torch.elastic.state import (ModelStateHandler, OptimizerStateHandler, SamplerStateHandler,
                                          StateHandler, TorchState, get_handler_registry, set_handler_registry)


def run(func):
    """Decorator: `func(state, ...)` runs in the elastic loop. No collective
    may run before it (a rank would wait in it while the others sync)."""
    return run_fn(func, _reset)


def _reset():
    timeout = float(os.environ.get("GRADSYNC_ELASTIC_TIMEOUT", os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600")))
    # The daemon decides within `timeout` (the job below its minimum waits
    # that long for new ranks, then fails naming why): wait a little longer.
    basics.rejoin(timeout + 30)


def epoch():
    """The job's current epoch (0 when the job is not elastic)."""
    return basics.epoch()


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "HorovodInternalError",
           "HostsUpdatedInterrupt", "MembershipChangedError", "HostUpdateResult", "StateHandler",
           "ModelStateHandler", "OptimizerStateHandler", "SamplerStateHandler", "get_handler_registry",
           "set_handler_registry", "epoch"]
