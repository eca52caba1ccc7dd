# SPDX-License-Identifier: Apache-2.0
"""The job's timeline: rank 0's start_timeline decides; the daemon writes
Chrome-trace JSON, one row per tensor, valid JSON after every event."""
import json
import os
import time

import torch

import gradsync.torch as hvd


def rows(path):
    """Events by tensor name (parsing fails the test when the file is not JSON).
    The file is valid JSON after every event, but a read that spans one (the
    other ranks go on submitting) can join the old closing bracket to the new
    event: read again then, as a viewer opening the file later would."""
    for attempt in range(100):
        with open(path) as f:
            text = f.read()
        try:
            events = json.loads(text)
            break
        except json.JSONDecodeError:
            if attempt == 99:
                raise
            time.sleep(0.01)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    by_tensor = {}
    for e in events:
        if e.get("ph") != "M":
            by_tensor.setdefault(names[e["pid"]], []).append(e)
    return by_tensor


def test_timeline_records_the_phases_of_a_known_allreduce(rank, size):
    path = "/tmp/gradsync-timeline-%s.json" % os.environ.get("GRADSYNC_JOB_ID", "job")
    hvd.start_timeline(path, mark_cycles=True)
    hvd.barrier()  # rank 0's timeline runs before anyone submits
    hvd.allreduce(torch.ones(1 << 18), op=hvd.Sum, name="tl.known")
    hvd.barrier()
    if rank == 0:
        mid_run = rows(path)  # valid JSON while the timeline still runs
        assert "tl.known" in mid_run
    hvd.stop_timeline()
    hvd.barrier()
    hvd.allreduce(torch.ones(4), name="tl.after_stop")
    if rank != 0:
        return
    tensor = rows(path)["tl.known"]
    phases = [(e["ph"], e["name"]) for e in tensor]
    assert phases[0] == ("B", "NEGOTIATE_ALLREDUCE")
    ready = sorted(e["args"]["rank"] for e in tensor if e["ph"] == "i")
    assert ready == list(range(size))  # the waiting for ranks, one arrival each
    assert phases.index(("E", "NEGOTIATE_ALLREDUCE")) < phases.index(("B", "ALLREDUCE"))
    assert ("B", "REDUCE") in phases and ("E", "REDUCE") in phases
    begin = next(e for e in tensor if e["ph"] == "B" and e["name"] == "ALLREDUCE")
    assert begin["args"]["bytes"] == 4 << 18 and begin["args"]["dtype"] == "float32"
    end = next(e for e in tensor if e["ph"] == "E" and e["name"] == "ALLREDUCE")
    assert end["args"]["ok"] is True and end["ts"] >= begin["ts"]
    assert "tl.after_stop" not in rows(path)
    assert any(e["name"] == "CYCLE_START" for e in rows(path).get("cycles", []))
    os.unlink(path)
