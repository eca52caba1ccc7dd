# SPDX-License-Identifier: Apache-2.0
"""init/shutdown and the rank queries of gradsync.torch."""
import atexit
import ctypes
import gc
import os
import warnings

from gradsync import _native as native
from gradsync.torch import _context, arena
from gradsync.torch.process_sets import ProcessSet, global_process_set


def _scheduler_identity(env):
    """GRADSYNC_* variables for a rank started by Slurm or torchrun, when the
    launcher did not set them (gradsyncrun always does)."""
    if "GRADSYNC_RANK" in env:
        return {}
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        job = "slurm-%s.%s" % (env.get("SLURM_JOB_ID", "0"), env.get("SLURM_STEP_ID", "0"))
        local_size = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "").split("(")[0]
        ids = {"GRADSYNC_RANK": env["SLURM_PROCID"], "GRADSYNC_SIZE": env["SLURM_NTASKS"],
               "GRADSYNC_LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
               "GRADSYNC_CROSS_RANK": env.get("SLURM_NODEID", "0"),
               "GRADSYNC_CROSS_SIZE": env.get("SLURM_NNODES", "1")}
        if local_size.isdigit():
            ids["GRADSYNC_LOCAL_SIZE"] = local_size
    elif "RANK" in env and "WORLD_SIZE" in env:
        # A restart (--max-restarts) is a new job: its attempt is in the id.
        run = env.get("TORCHELASTIC_RUN_ID") or "%s:%s" % (env.get("MASTER_ADDR"), env.get("MASTER_PORT"))
        job = "torchrun-%s-%s" % (run, env.get("TORCHELASTIC_RESTART_COUNT", "0"))
        ids = {"GRADSYNC_RANK": env["RANK"], "GRADSYNC_SIZE": env["WORLD_SIZE"],
               "GRADSYNC_LOCAL_RANK": env.get("LOCAL_RANK", "0"),
               "GRADSYNC_LOCAL_SIZE": env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]),
               "GRADSYNC_CROSS_RANK": env.get("GROUP_RANK", "0")}
    else:
        return {}
    ids.setdefault("GRADSYNC_JOB_ID", env.get("GRADSYNC_JOB_ID", job))
    # Without a launcher-made secret, the job id is the token: any process of
    # the node that knows it may join. Set GRADSYNC_TOKEN to a secret instead.
    ids.setdefault("GRADSYNC_TOKEN", env.get("GRADSYNC_TOKEN", job))
    return ids


def init(comm=None, process_sets=None):
    """Connects this rank to its node's gradsyncd (identity from GRADSYNC_*,
    Slurm or torchrun variables). `process_sets`: ProcessSet objects, the same
    on every rank. `comm` (an MPI communicator in Horovod) is not supported."""
    if comm is not None:
        raise NotImplementedError("gradsync does not run over MPI communicators; ranks come from the launcher")
    if _context.is_set():
        return
    env = dict(os.environ)
    for key, value in _scheduler_identity(env).items():
        os.environ.setdefault(key, value)
    lib = native.load_library()
    config = native.new_config(lib)
    process_sets = list(process_sets or [])
    keep = [(ctypes.c_int32 * len(s.ranks))(*s.ranks) for s in process_sets]
    if process_sets:
        config.num_process_sets = len(process_sets)
        config.process_set_sizes = (ctypes.c_int32 * len(process_sets))(*[len(s.ranks) for s in process_sets])
        config.process_set_ranks = (ctypes.POINTER(ctypes.c_int32) * len(process_sets))(
            *[ctypes.cast(k, ctypes.POINTER(ctypes.c_int32)) for k in keep])
    client = native.Client(lib, config)
    sets = {0: global_process_set}
    global_process_set._bind(0, client.rank, client.size)
    for i, s in enumerate(process_sets, start=1):
        s._bind(i, client.rank, client.size)
        sets[i] = s
    cross_size = int(os.environ.get("GRADSYNC_CROSS_SIZE", "0")) or max(1, client.size // max(1, client.local_size))
    cross_rank = int(os.environ.get("GRADSYNC_CROSS_RANK", str(client.rank // max(1, client.local_size))))
    _context.set_current(_context.Context(client, lib, sets, cross_rank, cross_size))


def shutdown():
    """Leaves the job; operations still in flight fail."""
    if not _context.is_set():
        return
    ctx = _context.current()
    for gradient_arena in list(ctx.gradient_arenas):
        gradient_arena.release()
    gc.collect()  # arena tensors in reference cycles give their blocks back
    count, nbytes = arena.live_blocks()
    if count:
        warnings.warn("gradsync: %d tensors of the shared arena (%d bytes) are still alive at shutdown: they keep "
                      "their values in private memory" % (count, nbytes))
    _context.set_current(None)
    ctx.client.shutdown()


atexit.register(shutdown)


def rejoin(timeout_seconds=600):
    """Elastic jobs, after a MembershipChangedError: waits for the job's
    next epoch and takes up this rank's place in it (rank() and size() then
    give the new values). elastic.run() calls it; call it yourself only
    when driving the recovery by hand."""
    ctx = _context.current()
    ctx.client.rejoin(timeout_seconds)
    ctx.start_epoch(global_process_set)


def epoch():
    """An elastic job's current epoch (1 at the start; 0: not elastic)."""
    return _context.current().client.epoch


def is_initialized():
    return _context.is_set()


def size():
    return _context.current().client.size


def rank():
    return _context.current().client.rank


def local_size():
    return _context.current().client.local_size


def local_rank():
    return _context.current().client.local_rank


def cross_size():
    return _context.current().cross_size


def cross_rank():
    return _context.current().cross_rank


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return False


def release_cuda_exports():
    """gradsync's own: the daemon unmaps every CUDA allocation this rank has
    handed over. Call it before torch.cuda.empty_cache() (or anything else
    that returns CUDA memory to the driver); later operations export again."""
    _context.current().client.release_cuda_exports()


def start_timeline(file_path, mark_cycles=False):
    """Starts the job's timeline in `file_path` (Chrome-trace JSON, for
    Perfetto or chrome://tracing), replacing one that runs. As in Horovod,
    rank 0's call decides; the others' do nothing."""
    _context.current().client.start_timeline(str(file_path), mark_cycles)


def stop_timeline():
    """Stops the job's timeline; the file stays valid JSON."""
    _context.current().client.stop_timeline()


__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
           "cross_rank", "ProcessSet", "start_timeline", "stop_timeline", "rejoin", "epoch"]
