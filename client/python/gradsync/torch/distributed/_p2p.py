# SPDX-License-Identifier: Apache-2.0
"""Point-to-point send/recv of a process group (pipeline parallelism).

Each pair of ranks that talks is a gradsync job of two ranks, made at its
first send or recv (both ranks derive its id from the group's job; the
group's token admits them), and a message is a broadcast in it from the
sender: its n-th message from src to dst with tag t is named
"src>dst.t.n" on both sides, so the two directions and the tags are
matched apart, in order, as c10d requires.

Limit: a pair costs one client connection (and arena) per rank and a job in
the daemons: fine for the neighbours of a pipeline; a job in which every
rank sends to every other would hold W-1 of them per rank."""
import json
import threading

from gradsync import _native as native
from gradsync.torch.distributed import _node
from gradsync.torch._submit import check_tensor
from gradsync.torch.distributed._ops import flat_view, new_op


class PairChannels:
    """The pairs of one process group that this rank sends to or receives from."""

    def __init__(self, store, rank, size, job_id, token, node_daemon, node_key, timeout_seconds):
        self._store = store
        self._rank = rank
        self._size = size
        self._job_id = job_id
        self._token = token
        self._socket = node_daemon.socket_path
        self._timeout = timeout_seconds
        self._lib = native.load_library()
        self._pairs = {}  # peer group rank -> native.Client
        self._counts = {}  # (src, dst, tag) -> messages so far
        self._lock = threading.Lock()
        store.set("gradsync/where/%d" % rank, json.dumps({"node": node_key, "peer": node_daemon.peer_address}))

    def message(self, tensor, peer, tag, sending, what):
        """(the pair's client, the op, what it keeps alive) of one message."""
        check_tensor(tensor, what)
        src, dst = (self._rank, peer) if sending else (peer, self._rank)
        with self._lock:
            n = self._counts.get((src, dst, tag), 0)
            self._counts[(src, dst, tag)] = n + 1
        client = self._pair(peer, what)
        flat, copied = flat_view(tensor)
        if copied and not sending:
            raise ValueError("%s: recv needs a contiguous tensor" % what)
        keep = []
        root = 0 if src < dst else 1  # the sender's rank in the pair
        op = new_op(self._lib, native.BROADCAST, "%d>%d.%d.%d" % (src, dst, tag, n), flat, keep, root_rank=root)
        return client, op, keep

    def _pair(self, peer, what):
        with self._lock:
            client = self._pairs.get(peer)
        if client is not None:
            return client
        if not 0 <= peer < self._size:
            raise ValueError("%s: no rank %d in this group" % (what, peer))
        if peer == self._rank:
            raise ValueError("%s: a rank cannot send to itself" % what)
        low, high = min(self._rank, peer), max(self._rank, peer)
        mine = json.loads(_node._wait_key(self._store, "gradsync/where/%d" % self._rank, self._timeout, what))
        theirs = json.loads(_node._wait_key(self._store, "gradsync/where/%d" % peer, self._timeout,
                                            what + ": where rank %d runs" % peer))
        same_node = mine["node"] == theirs["node"]
        config = native.new_config(self._lib)
        config.socket_path = self._socket.encode()
        config.job_id = ("%s.p2p.%d.%d" % (self._job_id, low, high)).encode()
        config.token = self._token.encode()
        config.rank, config.world_size = (0 if self._rank == low else 1), 2
        config.local_rank, config.local_size = (config.rank, 2) if same_node else (0, 1)
        config.connect_timeout_seconds = self._timeout
        config.leader_address = ("" if same_node else (mine if self._rank == low else theirs)["peer"]).encode()
        client = native.Client(self._lib, config)
        with self._lock:
            self._pairs[peer] = client
        return client

    def shutdown(self):
        with self._lock:
            pairs, self._pairs = list(self._pairs.values()), {}
        for client in pairs:
            try:
                client.shutdown()
            except Exception:
                pass  # the pair's other side may be gone already

