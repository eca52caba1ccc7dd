# SPDX-License-Identifier: Apache-2.0
"""gradsync as a torch.distributed backend.

    import gradsync.torch.distributed  # registers the "gradsync" backend
    torch.distributed.init_process_group("gradsync")  # or "cpu:gradsync,cuda:gradsync"

DDP, FSDP2 and the libraries on top of torch.distributed then run their
collectives on the node's gradsyncd. Identity comes from the launcher
(torchrun's RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK...; Slurm's through
init_process_group's env:// rendezvous); the job id, its token and the
leader's address are agreed through the c10d store. The node's gradsyncd is
used when its socket answers; otherwise the node's first rank starts a
private one for the job (GRADSYNC_DAEMON, PATH, or the wheel's) and stops it
after the job.
"""
import os

import torch.distributed as dist

from gradsync.torch.distributed._node import NodeDaemon, node_identity
from gradsync.torch.distributed.process_group import ProcessGroupGradsync

BACKEND = "gradsync"


def _create(backend_options, pg_options=None):
    """c10d's creator (extended API): one ProcessGroupGradsync per group."""
    # torchrun keeps its store across restarts (--max-restarts): what the
    # ranks agree there is kept apart per attempt, and each attempt is a new job.
    store = dist.PrefixStore("gradsync-attempt-%s/" % os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"),
                             backend_options.store)
    rank, size = backend_options.group_rank, backend_options.group_size
    timeout = backend_options.timeout
    default = _default_group()
    if default is not None:  # a subgroup: the node's daemon is the default group's
        daemon, owns = default._node_daemon, False
        node_key = node_identity(os.environ)[0]
    else:
        daemon, node_key = NodeDaemon.find_or_start(store, rank, size, os.environ, timeout.total_seconds())
        owns = True
    return ProcessGroupGradsync(store, rank, size, timeout, daemon, node_key, owns)


def _default_group():
    """The default group when it is a gradsync one (else None)."""
    if not dist.is_initialized():
        return None
    group = dist.distributed_c10d._get_default_group()
    return group if isinstance(group, ProcessGroupGradsync) else None


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])


_register()

__all__ = ["BACKEND", "ProcessGroupGradsync"]
