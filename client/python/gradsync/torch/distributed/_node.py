# SPDX-License-Identifier: Apache-2.0
"""Where a rank of a torch.distributed job finds its gradsyncd, and what the
ranks agree through the c10d store that init_process_group already has.

A node is what the launcher calls one: torchrun's GROUP_RANK, Slurm's
SLURM_NODEID, else the host name. Its daemon is the system one when its
socket answers (GRADSYNC_SOCKET, else /run/gradsync/gradsyncd.sock);
otherwise the node's first rank starts a private one for the job (as
gradsyncrun does), publishes its socket in the store and stops it once
every rank of the node has left, or when that rank exits."""
import atexit
import datetime
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

from gradsync.errors import GradsyncError
from gradsync.runner import daemon as daemons

# How long the daemon's owner waits at the end for the node's other ranks to
# leave before it stops the daemon under them.
_LEAVE_GRACE_SECONDS = 10.0


def node_identity(env):
    """(node key, local rank, local size, nodes) of this process, from
    torchrun's or Slurm's variables; None fields where the launcher gave none."""
    if "LOCAL_RANK" in env and "GROUP_RANK" in env:  # torchrun (elastic agent)
        local_size = int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
        nodes = max(1, int(env.get("WORLD_SIZE", "1")) // max(1, local_size))
        return "node-" + env["GROUP_RANK"], int(env["LOCAL_RANK"]), local_size, nodes
    if "SLURM_PROCID" in env and "SLURM_NODEID" in env:
        local_size = (env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")).split("(")[0]
        return ("slurm-node-" + env["SLURM_NODEID"], int(env.get("SLURM_LOCALID", "0")),
                int(local_size) if local_size.isdigit() else None, int(env.get("SLURM_NNODES", "1")))
    return "host-" + socket.gethostname(), None, None, None


def _store_get(store, key):
    return store.get(key).decode()


class NodeDaemon:
    """The daemon this rank uses: its socket, its peer address (for jobs of
    several nodes), and the private daemon when this rank started it."""

    def __init__(self, socket_path, peer_address, private, store, node_key, local_size):
        self.socket_path = socket_path
        self.peer_address = peer_address
        self._private = private
        self._store = store
        self._node_key = node_key
        self._local_size = local_size
        self._left = False
        self._lock = threading.Lock()
        if private is not None:
            atexit.register(self.leave)

    @classmethod
    def find_or_start(cls, store, rank, world_size, env, timeout_seconds):
        """Every rank of the job calls this once (with the default group's
        store): the ranks of a node share one daemon."""
        node_key, local_rank, local_size, nodes = node_identity(env)
        arrival = store.add("gradsync/node/%s/arrived" % node_key, 1) - 1
        if local_rank is None:
            local_rank = arrival
        multi_node = nodes != 1 and not (local_size == world_size)
        system = env.get("GRADSYNC_SOCKET") or daemons.DEFAULT_SOCKET
        key = "gradsync/node/%s/daemon" % node_key
        private = None
        if local_rank == 0:
            if daemons.answers(system):
                socket_path = system
            else:
                private = _start_private(env, multi_node)
                socket_path = private.socket_path
            peer = _peer_address(socket_path, env) if multi_node else ""
            store.set(key, json.dumps({"socket": socket_path, "peer": peer}))
        published = _wait_key(store, key, timeout_seconds, "rank %d: the daemon of node %s (its first rank starts "
                              "or finds it)" % (rank, node_key))
        found = json.loads(published)
        return cls(found["socket"], found["peer"], private, store, node_key, local_size), node_key

    def learn_local_size(self, local_size):
        """The node's rank count, counted in the store, where the launcher
        did not say it (the owner waits for that many to leave)."""
        if not self._local_size:
            self._local_size = local_size

    def leave(self):
        """This rank is done with the daemon. Its owner stops a private one
        once the node's other ranks have left too (bounded wait)."""
        with self._lock:
            if self._left:
                return
            self._left = True
        try:
            left = self._store.add("gradsync/node/%s/left" % self._node_key, 1)
        except Exception:  # the store's server (rank 0) may be gone at exit
            left = None
        if self._private is None:
            return
        deadline = time.monotonic() + _LEAVE_GRACE_SECONDS
        while left is not None and self._local_size and left < self._local_size and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                left = self._store.add("gradsync/node/%s/left" % self._node_key, 0)
            except Exception:
                break
        code, log = self._private.stop()
        if code != 0:
            sys.stderr.write("gradsync: the private gradsyncd exited with %d; its log:\n%s" % (code, log[-20000:]))


def _wait_key(store, key, timeout_seconds, what):
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            store.wait([key], datetime.timedelta(seconds=min(5.0, max(0.1, deadline - time.monotonic()))))
            return _store_get(store, key)
        except Exception as error:  # the store's own timeout
            if time.monotonic() >= deadline:
                raise GradsyncError("timed out after %.0f s waiting for %s: %s" % (timeout_seconds, what,
                                                                                    error)) from None


def _start_private(env, multi_node):
    """A private gradsyncd for this node's ranks. Jobs of several nodes need
    its peer service: on GRADSYNC_PEER_HOST (default: this host's address)."""
    args = list(filter(None, env.get("GRADSYNC_DAEMON_ARGS", "").split(" ")))
    if multi_node:
        host = env.get("GRADSYNC_PEER_HOST") or socket.gethostbyname(socket.gethostname())
        args += ["--peer-address", "%s:0" % host]
    return daemons.PrivateDaemon(daemons.find_binary("gradsyncd", env_var="GRADSYNC_DAEMON"), args,
                                 owner_pid=os.getpid())


def _peer_address(socket_path, env):
    """The daemon's peer address, asked with gradsyncctl (as gradsyncrun does)."""
    ctl = daemons.find_binary("gradsyncctl", env_var="GRADSYNC_CTL") or "gradsyncctl"
    out = subprocess.run([ctl, "status", "--json", "--socket", socket_path], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        raise GradsyncError("cannot ask the gradsyncd at %s for its peer address: %s" % (
            socket_path, out.stderr.strip() or out.stdout.strip()))
    status = json.loads(out.stdout)
    address = status.get("peerAddress") or status.get("peer_address")
    if not address:
        raise GradsyncError("the gradsyncd at %s has no peer address: a job of several nodes needs one "
                            "(start it with --peer-address)" % socket_path)
    bound_host, _, port = address.rpartition(":")
    if bound_host in ("0.0.0.0", "[::]", ""):
        bound_host = env.get("GRADSYNC_PEER_HOST") or socket.gethostbyname(socket.gethostname())
    return "%s:%s" % (bound_host, port)


def agree_job(store, group_rank, timeout_seconds, env, what):
    """The job id and token of one process group, made by its rank 0 and
    read by the others from the group's store. A token every rank has in
    GRADSYNC_TOKEN or in the file GRADSYNC_TOKEN_FILE names (a Kubernetes
    Secret, say) is used instead of a drawn one and never enters the store.
    A torchrun restart is a new job (the store's keys are per attempt)."""
    key = "gradsync/job"
    own_token = env.get("GRADSYNC_TOKEN")
    if not own_token and env.get("GRADSYNC_TOKEN_FILE"):
        with open(env["GRADSYNC_TOKEN_FILE"]) as f:
            own_token = f.read().strip()
    if group_rank == 0:
        job = {"id": "c10d-%s" % secrets.token_hex(8), "token": None if own_token else secrets.token_hex(16)}
        store.set(key, json.dumps(job))
    job = json.loads(_wait_key(store, key, timeout_seconds, what))
    return job["id"], own_token or job["token"]


def place_in_node(store, node_key, group_rank, group_size, timeout_seconds, what):
    """This rank's local rank and the number of the group's ranks on its
    node: O(1) store operations per rank (a counter per node, one for all)."""
    local_rank = store.add("gradsync/local/%s" % node_key, 1) - 1
    if store.add("gradsync/placed", 1) == group_size:
        store.set("gradsync/placed/all", "1")
    _wait_key(store, "gradsync/placed/all", timeout_seconds, what)
    return local_rank, store.add("gradsync/local/%s" % node_key, 0)


def agree_leader(store, group_rank, daemon, timeout_seconds, what):
    """The peer address of the daemon of the group's rank 0 ("" on one node)."""
    if group_rank == 0:
        store.set("gradsync/leader", daemon.peer_address)
    return _wait_key(store, "gradsync/leader", timeout_seconds, what)
