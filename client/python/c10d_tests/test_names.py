# SPDX-License-Identifier: Apache-2.0
"""The backend's call names (no daemon): they repeat from step to step, stay
apart within a call, and a slot is taken again only once it is free."""
import threading

import torch

from gradsync.torch.distributed import _names
from gradsync.torch.distributed._names import SLOTS, CallNames, signature


class _Work:
    def __init__(self):
        self.what = "an earlier call"
        self._done = threading.Event()
        self.handed_over = False

    def _hand_over(self):
        self.handed_over = True


def test_names_repeat_every_slots_steps_and_calls_are_numbered_in_order():
    names = CallNames()
    steps = [names.next("allreduce", [signature(torch.zeros(5)), signature(torch.zeros(7))])
             for _ in range(2 * SLOTS)]
    assert [call for step in steps for _, call in step] == list(range(1, 4 * SLOTS + 1))
    assert steps[0][0][0] == "allreduce.float32x5.0" and steps[1][0][0] == "allreduce.float32x5.1"
    assert [n for n, _ in steps[SLOTS]] == [n for n, _ in steps[0]]
    assert len({n for step in steps for n, _ in step}) == 2 * SLOTS


def test_tensors_of_one_signature_in_one_call_get_names_apart():
    names = [n for n, _ in CallNames().next("allreduce_coalesced", ["float32x4"] * 3)]
    assert names == ["allreduce_coalesced.float32x4.0", "allreduce_coalesced.float32x4.0.1",
                     "allreduce_coalesced.float32x4.0.2"]


def test_alltoall_names_leave_the_count_out_and_bad_input_is_named_invalid():
    assert signature(torch.zeros(3, dtype=torch.int64), with_count=False) == "int64"
    assert signature([1, 2]) == "invalid"


def test_a_slot_is_taken_again_only_once_its_call_completed():
    names = CallNames()
    work = _Work()
    names.hold(["x"], work)
    threading.Timer(0.2, work._done.set).start()
    names.wait_until_free(["x"], 10, "the next call")
    assert work.handed_over and work._done.is_set()
    stuck = _Work()
    names.hold(["y"], stuck)
    try:
        names.wait_until_free(["y"], 0.1, "the next call")
    except RuntimeError as error:
        assert "the earlier call named 'y' (an earlier call) did not complete" in str(error)
    else:
        raise AssertionError("no error")


def test_counts_start_again_on_every_rank_alike_past_the_limit(monkeypatch):
    monkeypatch.setattr(_names, "MAX_SIGNATURES", 3)
    a, b = CallNames(), CallNames()
    sizes = [1, 2, 3, 1, 4, 5, 1, 1]
    seen_a = [a.next("allreduce", ["float32x%d" % s])[0][0] for s in sizes]
    seen_b = [b.next("allreduce", ["float32x%d" % s])[0][0] for s in sizes]
    assert seen_a == seen_b
    assert len(a._seen) <= 3
