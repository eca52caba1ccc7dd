# SPDX-License-Identifier: Apache-2.0
"""Names and call numbers of one process group's collectives.

The daemon matches the ranks' requests by name, and across daemons its
response cache serves a request whose name and metadata it has seen before
without the leader's round trip. A name is therefore made of what every
rank gives alike (the kind of call, the dtype, the element count where the
ranks' counts must agree) and a slot: how many calls of that signature the
group made before, modulo SLOTS. A training step repeats its calls, so from
the (SLOTS + 1)-th step on every name is one the daemon has cached. A slot is
taken again only once the call that held it has completed on this rank,
which bounds the calls of one signature in flight at SLOTS.

Every request also carries its call number (1, 2, ... alike on every rank):
when the ranks' calls differ (a shape that differs makes another name), the
daemon fails both at once, naming them, instead of waiting for the stall
deadline."""
import collections
import threading
import weakref

SLOTS = 4
# Signatures remembered before the counts start again (calls of ever new
# sizes, such as object collectives, would grow the tables without end).
# Every rank sees the same calls, so every rank starts again at one call.
MAX_SIGNATURES = 4096


def signature(tensor, with_count=True):
    """"float32x1024" (the element count only where the ranks' must agree);
    "invalid" for what is not a tensor (the call then fails on this rank)."""
    try:
        dtype = str(tensor.dtype).replace("torch.", "")
        return "%sx%d" % (dtype, tensor.numel()) if with_count else dtype
    except (AttributeError, TypeError, RuntimeError):
        return "invalid"


class CallNames:
    def __init__(self):
        self._lock = threading.Lock()
        self._calls = 0
        self._seen = collections.Counter()  # (kind, signature) -> calls so far
        self._holders = {}  # name -> the Work that used it last (weakly)

    @property
    def calls(self):
        return self._calls

    def next(self, kind, signatures):
        """[(name, call number)] of one call of `kind` over tensors of these
        signatures (several of one signature in a call get names apart)."""
        out = []
        with self._lock:
            if len(self._seen) >= MAX_SIGNATURES:
                self._forget()
            within = collections.Counter()
            for sig in signatures:
                key = (kind, sig)
                slot = self._seen[key] % SLOTS
                repeat = within[key]
                within[key] += 1
                self._calls += 1
                name = "%s.%s.%d" % (kind, sig, slot) + (".%d" % repeat if repeat else "")
                out.append((name, self._calls))
            for key in within:
                self._seen[key] += 1
        return out

    def wait_until_free(self, names, seconds, what):
        """Waits until the calls that last used `names` have completed here
        (handing them to the completer so that they do)."""
        for name in names:
            with self._lock:
                held = self._holders.get(name)
            work = held() if held is not None else None
            if work is None or work._done.is_set():
                continue
            work._hand_over()
            if not work._done.wait(seconds):
                raise RuntimeError("gradsync: %s: the earlier call named '%s' (%s) did not complete within %.0f s"
                                   % (what, name, work.what, seconds))

    def _forget(self):
        """Starts the counts again; names whose call may still be in flight
        keep their holder, so a slot is still taken only once it is free."""
        self._seen.clear()
        for name, held in list(self._holders.items()):
            work = held()
            if work is None or work._done.is_set():
                del self._holders[name]

    def hold(self, names, work):
        with self._lock:
            for name in names:
                self._holders[name] = weakref.ref(work)
