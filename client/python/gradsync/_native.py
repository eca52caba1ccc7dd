# SPDX-License-Identifier: Apache-2.0
"""ctypes binding of libgradsync's C ABI (client/include/gradsync/gradsync.h).

Only this module knows the C structs; everything above it speaks Python.
The library is found through $GRADSYNC_LIBRARY, then beside this package
(in _lib/ when installed from the wheel), then in the Bazel output tree of a
source checkout, then where the dynamic linker looks (the gradsync Debian
package installs it there).
"""
import ctypes
import os
import threading

from gradsync.errors import GradsyncError, MembershipChangedError

CONFIG_VERSION = 1
MAX_DIMS = 16

# Collectives, reductions and element types: the values of gradsync.h.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = range(1, 8)
SUM, AVERAGE, MIN, MAX, PRODUCT, ADASUM = range(1, 7)
UINT8, INT8, UINT16, INT16, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, BOOL = range(1, 12)
DEVICE_CPU, DEVICE_CUDA = 0, 1
# Status codes (gradsync_status_t) the Python layer tells apart.
INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = 3, 4, 5, 6
MEMBERSHIP_CHANGED = 100  # gradsync's own (gradsync.h)


class Config(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("socket_path", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("local_size", ctypes.c_int32),
        ("arena_bytes", ctypes.c_uint64),
        ("connect_timeout_seconds", ctypes.c_double),
        ("num_process_sets", ctypes.c_int32),
        ("process_set_sizes", ctypes.POINTER(ctypes.c_int32)),
        ("process_set_ranks", ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))),
        ("leader_address", ctypes.c_char_p),
    ]


class Op(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("collective", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
        ("reduce_op", ctypes.c_int32),
        ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double),
        ("root_rank", ctypes.c_int32),
        ("process_set", ctypes.c_int32),
        ("splits", ctypes.POINTER(ctypes.c_int64)),
        ("num_splits", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("output", ctypes.c_void_p),
        ("output_bytes", ctypes.c_uint64),
        ("call", ctypes.c_uint64),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("num_received_splits", ctypes.c_int32),
        ("received_splits", ctypes.POINTER(ctypes.c_int64)),
        ("last_joined_rank", ctypes.c_int32),
    ]


def _candidates():
    env = os.environ.get("GRADSYNC_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "_lib", "libgradsync.so")
    yield os.path.join(here, "libgradsync.so")
    # Source checkout: client/python/gradsync -> <root>/bazel-bin/client.
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    yield os.path.join(root, "bazel-bin", "client", "libgradsync.so")


def load_library():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return _declare(ctypes.CDLL(path))
        tried.append(path)
    try:
        return _declare(ctypes.CDLL("libgradsync.so"))
    except OSError:
        tried.append("libgradsync.so in the system's library path")
    raise GradsyncError(
        "cannot find libgradsync.so (tried %s); set GRADSYNC_LIBRARY to its path" % ", ".join(tried))


def _declare(lib):
    c = ctypes
    client = c.c_void_p
    signatures = {
        "gradsync_version": (c.c_char_p, []),
        "gradsync_last_error": (c.c_char_p, []),
        "gradsync_config_init": (c.c_int32, [c.POINTER(Config)]),
        "gradsync_op_init_sized": (c.c_int32, [c.POINTER(Op), c.c_uint32]),
        "gradsync_init": (c.c_int32, [c.POINTER(Config), c.POINTER(client)]),
        "gradsync_shutdown": (c.c_int32, [client]),
        "gradsync_rank": (c.c_int32, [client]),
        "gradsync_size": (c.c_int32, [client]),
        "gradsync_local_rank": (c.c_int32, [client]),
        "gradsync_local_size": (c.c_int32, [client]),
        "gradsync_alloc": (c.c_void_p, [client, c.c_uint64]),
        "gradsync_free": (c.c_int32, [client, c.c_void_p]),
        "gradsync_arena_bytes": (c.c_uint64, [client]),
        "gradsync_enqueue": (c.c_int32, [client, c.POINTER(Op), c.POINTER(c.c_uint64)]),
        "gradsync_enqueue_group": (c.c_int32, [client, c.POINTER(Op), c.c_int32, c.POINTER(c.c_uint64)]),
        "gradsync_abandon": (c.c_int32, [client, c.POINTER(Op), c.c_char_p, c.POINTER(c.c_uint64)]),
        "gradsync_start_timeline": (c.c_int32, [client, c.c_char_p, c.c_int32]),
        "gradsync_stop_timeline": (c.c_int32, [client]),
        "gradsync_poll": (c.c_int32, [client, c.c_uint64, c.POINTER(c.c_int32)]),
        "gradsync_wait": (c.c_int32, [client, c.c_uint64, c.c_double]),
        "gradsync_result": (c.c_int32, [client, c.c_uint64, c.POINTER(Result)]),
        "gradsync_release": (c.c_int32, [client, c.c_uint64]),
        "gradsync_release_cuda_exports": (c.c_int32, [client]),
        "gradsync_add_process_set": (c.c_int32, [client, c.POINTER(c.c_int32), c.c_int32, c.c_double,
                                                 c.POINTER(c.c_int32)]),
        "gradsync_remove_process_set": (c.c_int32, [client, c.c_int32, c.c_double]),
        "gradsync_epoch": (c.c_uint64, [client]),
        "gradsync_rejoin": (c.c_int32, [client, c.c_double]),
        "gradsync_commit_barrier": (c.c_int32, [client, c.c_double, c.POINTER(c.c_int32)]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


class Client:
    """One rank's connection to its daemon (gradsync_client_t)."""

    def __init__(self, lib, config):
        self._lib = lib
        self._handle = ctypes.c_void_p()
        # free() may come from a finalizer on any thread: never during
        # shutdown(). Reentrant: a finalizer can also run on the thread
        # that is in shutdown(), at any allocation.
        self._closing = threading.RLock()
        self._check(lib.gradsync_init(ctypes.byref(config), ctypes.byref(self._handle)), "init")

    def _check(self, status, what):
        if status != 0:
            message = self._lib.gradsync_last_error().decode("utf-8", "replace")
            error = MembershipChangedError if status == MEMBERSHIP_CHANGED else GradsyncError
            raise error("%s failed: %s" % (what, message), code=status)

    @property
    def rank(self):
        return self._lib.gradsync_rank(self._handle)

    @property
    def size(self):
        return self._lib.gradsync_size(self._handle)

    @property
    def local_rank(self):
        return self._lib.gradsync_local_rank(self._handle)

    @property
    def local_size(self):
        return self._lib.gradsync_local_size(self._handle)

    @property
    def arena_bytes(self):
        return self._lib.gradsync_arena_bytes(self._handle)

    @property
    def is_open(self):
        return bool(self._handle)

    def shutdown(self):
        with self._closing:
            if not self._handle:
                return
            handle, self._handle = self._handle, ctypes.c_void_p()
            status = self._lib.gradsync_shutdown(handle)
        self._check(status, "shutdown")

    def alloc(self, nbytes):
        """Address of `nbytes` in the shared arena, or None when it is full."""
        return self._lib.gradsync_alloc(self._handle, nbytes)

    def free(self, address):
        with self._closing:
            if self._handle:
                self._check(self._lib.gradsync_free(self._handle, address), "free")

    def enqueue(self, op, what):
        handle = ctypes.c_uint64()
        self._check(self._lib.gradsync_enqueue(self._handle, ctypes.byref(op), ctypes.byref(handle)), what)
        return handle.value

    def enqueue_group(self, ops, what):
        handles = (ctypes.c_uint64 * len(ops))()
        array = (Op * len(ops))(*ops)
        self._check(self._lib.gradsync_enqueue_group(self._handle, array, len(ops), handles), what)
        return list(handles)

    def abandon(self, op, reason):
        """The handle of this rank's data-less part in a collective it failed
        at the call (the others fail at once with `reason`)."""
        handle = ctypes.c_uint64()
        self._check(self._lib.gradsync_abandon(self._handle, ctypes.byref(op), reason.encode("utf-8", "replace")[:1024],
                                               ctypes.byref(handle)), "abandon")
        return handle.value

    @property
    def epoch(self):
        """Elastic jobs: the current epoch (0 when the job is not elastic)."""
        return self._lib.gradsync_epoch(self._handle)

    def rejoin(self, timeout_seconds=0):
        """Elastic jobs: takes up this rank's place in the job's next epoch."""
        self._check(self._lib.gradsync_rejoin(self._handle, timeout_seconds), "rejoin")

    def commit_barrier(self, timeout_seconds=0):
        """Elastic jobs: the barrier of a state commit; True when new ranks
        were admitted at it (the job moved to a new epoch)."""
        changed = ctypes.c_int32(0)
        self._check(self._lib.gradsync_commit_barrier(self._handle, timeout_seconds, ctypes.byref(changed)),
                    "commit")
        return bool(changed.value)

    def add_process_set(self, ranks):
        """Collective of every rank: the new set's id (the daemon numbers it)."""
        array = (ctypes.c_int32 * max(1, len(ranks)))(*ranks)
        new_id = ctypes.c_int32(-1)
        self._check(self._lib.gradsync_add_process_set(self._handle, array, len(ranks), 0, ctypes.byref(new_id)),
                    "add_process_set")
        return new_id.value

    def remove_process_set(self, process_set_id):
        self._check(self._lib.gradsync_remove_process_set(self._handle, process_set_id, 0), "remove_process_set")

    def start_timeline(self, path, mark_cycles):
        self._check(self._lib.gradsync_start_timeline(self._handle, path.encode(), 1 if mark_cycles else 0),
                    "start_timeline")

    def stop_timeline(self):
        self._check(self._lib.gradsync_stop_timeline(self._handle), "stop_timeline")

    def poll(self, handle):
        done = ctypes.c_int32()
        self._check(self._lib.gradsync_poll(self._handle, handle, ctypes.byref(done)), "poll")
        return bool(done.value)

    def wait(self, handle, what, between=None):
        """Waits in short slices (Ctrl-C works: Python handles signals between
        them), calling `between()` after each slice that ended unfinished."""
        while True:
            status = self._lib.gradsync_wait(self._handle, handle, 0.5 if between is None else 0.05)
            if status == DEADLINE_EXCEEDED and self.poll(handle):
                # Done: its own status (a stall deadline is DEADLINE_EXCEEDED
                # too), with its message (poll cleared the last error).
                self._check(self._lib.gradsync_wait(self._handle, handle, 0), what)
                return
            if status != DEADLINE_EXCEEDED:
                self._check(status, what)
                return
            if between is not None:
                between()

    def wait_for(self, handle, seconds):
        """Waits up to `seconds`; True when the operation has completed
        (wait() then returns or raises its status)."""
        status = self._lib.gradsync_wait(self._handle, handle, seconds)
        return status != DEADLINE_EXCEEDED or self.poll(handle)

    def result(self, handle):
        result = Result()
        result.struct_size = ctypes.sizeof(Result)
        self._check(self._lib.gradsync_result(self._handle, handle, ctypes.byref(result)), "result")
        return result

    def release(self, handle):
        self._check(self._lib.gradsync_release(self._handle, handle), "release")

    def release_cuda_exports(self):
        self._check(self._lib.gradsync_release_cuda_exports(self._handle), "release_cuda_exports")


def new_config(lib):
    config = Config()
    config.struct_size = ctypes.sizeof(Config)
    config.version = CONFIG_VERSION
    lib.gradsync_config_init(ctypes.byref(config))
    return config


def new_op(lib):
    op = Op()
    lib.gradsync_op_init_sized(ctypes.byref(op), ctypes.sizeof(Op))
    return op
