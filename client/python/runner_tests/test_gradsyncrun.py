# SPDX-License-Identifier: Apache-2.0
"""gradsyncrun end to end: identities, output prefixes, exit codes, Ctrl-C,
private daemon lifetime, several hosts (a fake ssh runs 'remote' ranks on
this machine against a second daemon), and torchrun-style identities."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fake_hosts
from gradsync.runner.hosts import assign_ranks, parse_hostfile, parse_hosts

RUN = os.environ["GRADSYNCRUN"]
PY = sys.executable

# A rank without torch: one allreduce of a float through the C ABI.
ALLREDUCE_RANK = r"""
import ctypes, os
from gradsync import _native as n
lib = n.load_library()
client = n.Client(lib, n.new_config(lib))
value = (ctypes.c_float * 1)(client.rank + 1.0)
shape = (ctypes.c_int64 * 1)(1)
op = n.new_op(lib)
op.collective, op.name, op.dtype, op.ndim = n.ALLREDUCE, b"x", n.FLOAT32, 1
op.shape, op.data, op.reduce_op = shape, ctypes.addressof(value), n.SUM
h = client.enqueue(op, "allreduce")
client.wait(h, "allreduce")
print("sum", value[0], "cross", os.environ["GRADSYNC_CROSS_RANK"], os.environ["GRADSYNC_CROSS_SIZE"])
client.shutdown()
"""


def run(args, **kw):
    return subprocess.run([RUN] + args, capture_output=True, text=True, timeout=120, **kw)


def test_hosts_parsing(tmp_path):
    assert parse_hosts("a:2,b") == [("a", 2), ("b", 1)]
    with pytest.raises(ValueError):
        parse_hosts("a:x")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2\nnode2:3\nnode3\n")
    assert parse_hostfile(str(hostfile)) == [("node1", 2), ("node2", 3), ("node3", 1)]
    assert assign_ranks([("a", 2), ("b", 2)], 3) == [("a", 0, 2, 0), ("a", 1, 2, 0), ("b", 0, 1, 1)]
    with pytest.raises(ValueError, match="slots"):
        assign_ranks([("a", 1)], 2)


def test_identities_prefixes_and_private_daemon():
    script = ("import os; e = os.environ; print(e['GRADSYNC_RANK'], e['GRADSYNC_SIZE'], e['GRADSYNC_LOCAL_RANK'], "
              "e['GRADSYNC_JOB_ID'], e['GRADSYNC_TOKEN'], e['GRADSYNC_SOCKET'])")
    out = run(["--private-daemon", "-np", "3", PY, "-c", script])
    assert out.returncode == 0, out.stderr
    lines = sorted(l for l in out.stdout.splitlines() if l)
    assert [l.split(":", 1)[0] for l in lines] == ["[0]<stdout>", "[1]<stdout>", "[2]<stdout>"]
    fields = [l.split(": ", 1)[1].split() for l in lines]
    assert [f[:3] for f in fields] == [["0", "3", "0"], ["1", "3", "1"], ["2", "3", "2"]]
    assert len({tuple(f[3:]) for f in fields}) == 1, "job id, token and socket shared by all ranks"
    assert len(fields[0][4]) == 32
    assert not os.path.exists(os.path.dirname(fields[0][5])), "the private daemon's directory is removed"


def test_real_allreduce_through_private_daemon():
    out = run(["-np", "2", "--private-daemon", PY, "-c", ALLREDUCE_RANK])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("sum 3.0 cross 0 1") == 2


def test_autotune_flags_reach_the_ranks():
    script = ("import os; e = os.environ; print(e['GRADSYNC_AUTOTUNE'], e['GRADSYNC_AUTOTUNE_STEPS_PER_SAMPLE'], "
              "'GRADSYNC_AUTOTUNE_WARMUP_SAMPLES' in e, e['GRADSYNC_AUTOTUNE_LOG'])")
    out = run(["--private-daemon", "--autotune", "--autotune-steps-per-sample", "4", "--autotune-log-file", "t.csv",
               "-np", "2", PY, "-c", script])
    assert out.returncode == 0, out.stderr
    want = "1 4 False " + os.path.abspath("t.csv")
    assert sorted(l.split(" ", 1)[1] for l in out.stdout.splitlines() if l) == [want] * 2
    out = run(["--autotune-samples-per-setting", "0", "-np", "1", PY, "-c", "pass"])
    assert out.returncode != 0 and "--autotune-samples-per-setting must be in [1, 100]" in out.stderr


# Rank 1 fails first; rank 2 fails once the launcher has reaped rank 1 (its
# pid is gone), so the order is certain, not a matter of timing.
FAIL_IN_ORDER = r"""
import os, sys, time
r, marks = int(os.environ["GRADSYNC_RANK"]), sys.argv[1]
if r == 1:
    open(marks + "/r1.tmp", "w").write(str(os.getpid()))
    os.rename(marks + "/r1.tmp", marks + "/r1.pid")
    sys.exit(7)
if r == 2:
    while not os.path.exists(marks + "/r1.pid"):
        time.sleep(0.01)
    pid = int(open(marks + "/r1.pid").read())
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    sys.exit(9)
"""


def test_exit_code_is_the_first_failing_ranks(tmp_path):
    out = run(["-np", "3", "--private-daemon", PY, "-c", FAIL_IN_ORDER, str(tmp_path)])
    assert out.returncode == 7
    assert "rank 1 exited with code 7" in out.stderr


def test_a_failed_rank_stops_the_others_after_the_grace_period():
    script = "import os, sys, time; sys.exit(3) if os.environ['GRADSYNC_RANK'] == '0' else time.sleep(60)"
    start = time.monotonic()
    out = run(["-np", "2", "--private-daemon", "--grace", "1", PY, "-c", script])
    assert out.returncode == 3 and time.monotonic() - start < 20


def test_ctrl_c_stops_every_rank(tmp_path):
    pids = tmp_path / "pids"
    script = "import os, time; open(%r, 'a').write('%%d\\n' %% os.getpid()); time.sleep(60)" % str(pids)
    launcher = subprocess.Popen([RUN, "-np", "2", "--private-daemon", PY, "-c", script],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=20) != 0
    for pid in pids.read_text().split():
        assert not os.path.exists("/proc/%s" % pid) or open("/proc/%s/stat" % pid).read().split()[2] == "Z"


def test_missing_daemon_binary_is_a_clear_error():
    env = dict(os.environ, GRADSYNC_DAEMON="/nonexistent/gradsyncd")
    out = run(["-np", "1", "--private-daemon", PY, "-c", "pass"], env=env)
    assert out.returncode == 2 and "gradsyncrun:" in out.stderr


@pytest.fixture
def two_daemons(tmp_path):
    """Two daemons with peer ports on loopback: the 'hosts' nodeA and nodeB."""
    with fake_hosts.daemons(tmp_path, flags=("--stall-warning-seconds", "10", "--stall-deadline-seconds", "30")) as s:
        yield s


def test_two_hosts_over_fake_ssh(tmp_path, two_daemons):
    ssh, env = fake_hosts.ssh_env(tmp_path, two_daemons)
    out = run(["-np", "3", "-H", "nodeA:2,nodeB:1", "--ssh", ssh, PY, "-c", ALLREDUCE_RANK], env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(l for l in out.stdout.splitlines() if "sum" in l)
    assert lines == ["[0]<stdout>: sum 6.0 cross 0 2", "[1]<stdout>: sum 6.0 cross 0 2",
                     "[2]<stdout>: sum 6.0 cross 1 2"]


def test_torchrun_style_identity(tmp_path):
    """A rank started with RANK/WORLD_SIZE/LOCAL_RANK (as torchrun sets them) joins without gradsyncrun."""
    pytest.importorskip("torch")
    sock = str(tmp_path / "d.sock")
    daemon = subprocess.Popen([os.environ["GRADSYNC_DAEMON"], "--socket-path", sock],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert daemon.poll() is None and time.monotonic() < deadline, "daemon did not start"
            time.sleep(0.05)
        script = ("import torch, gradsync.torch as hvd; hvd.init(); "
                  "print(hvd.rank(), hvd.allreduce(torch.ones(1), op=hvd.Sum).item())")
        ranks = []
        for r in range(2):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", GRADSYNC_SOCKET=sock)
            for key in [k for k in env if k.startswith("GRADSYNC_") and k not in ("GRADSYNC_SOCKET",
                                                                                    "GRADSYNC_LIBRARY")]:
                env.pop(key)
            ranks.append(subprocess.Popen(["/usr/bin/python3", "-c", script], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=60) for p in ranks]
        assert sorted(o[0].strip() for o in outs) == ["0 2.0", "1 2.0"], outs
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)


def test_examples_run(tmp_path):
    """The PyTorch examples train (and resume from rank 0's checkpoint) under gradsyncrun."""
    pytest.importorskip("torch")
    examples = os.environ["GRADSYNC_EXAMPLES"]
    checkpoint = str(tmp_path / "ckpt.pt")
    for epochs in (1, 2):
        out = run(["-np", "2", "--private-daemon", "/usr/bin/python3", os.path.join(examples, "train_convnet.py"),
                   "--epochs", str(epochs), "--samples", "512", "--checkpoint", checkpoint])
        assert out.returncode == 0, out.stdout + out.stderr
        assert "[0]<stdout>: epoch %d: loss" % (epochs - 1) in out.stdout
        assert "epoch 0" not in out.stdout or epochs == 1, "the second run resumes after epoch 0"
    out = run(["-np", "2", "--private-daemon", "/usr/bin/python3",
               os.path.join(examples, "pytorch_synthetic_benchmark.py"), "--model", "mlp", "--num-iters", "2",
               "--num-batches-per-iter", "1", "--num-warmup-batches", "1"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "img/sec per rank" in out.stdout and "waiting for gradients" in out.stdout


def test_timeline_from_the_environment(tmp_path):
    """HOROVOD_TIMELINE at init: rank 0's daemon writes the job's timeline."""
    script = tmp_path / "job.py"
    script.write_text("import torch, gradsync.torch as hvd\nhvd.init()\nhvd.allreduce(torch.ones(3))\nhvd.shutdown()\n")
    timeline = tmp_path / "timeline.json"
    out = run(["-np", "2", "--private-daemon", "/usr/bin/python3", str(script)],
              env=dict(os.environ, HOROVOD_TIMELINE=str(timeline)))
    assert out.returncode == 0, out.stdout + out.stderr
    events = json.loads(timeline.read_text())
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "allreduce.noname.0" in names
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= {e["name"] for e in events}


def test_quick_start_digits_train_to_identical_weights():
    """The Quick start's main job: real digits, accuracy per epoch, identical weights."""
    pytest.importorskip("sklearn")
    out = run(["-np", "2", "--private-daemon", "/usr/bin/python3",
               os.path.join(os.environ["GRADSYNC_EXAMPLES"], "train_digits.py"), "--epochs", "4",
               "--min-accuracy", "0.85"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[0]<stdout>: epoch 4: loss" in out.stdout
    for r in range(2):
        assert "[%d]<stdout>: rank %d: test accuracy" % (r, r) in out.stdout
    assert out.stdout.count("weights identical on all 2 ranks: True") == 2


# Rank 0 waits in an allreduce that rank 1 never joins; the daemon's stall
# deadline fails it. The error that reaches Python must carry the daemon's
# message (it once arrived empty: the wait loop read the text after a poll
# had cleared it).
STALL_RANK = r"""
import ctypes, os, sys, time
from gradsync import _native as n
from gradsync.errors import GradsyncError
lib = n.load_library()
client = n.Client(lib, n.new_config(lib))
marks = sys.argv[1]
if client.rank == 1:  # stays in the job until rank 0 has its error
    while not os.path.exists(marks + "/rank0.done"):
        time.sleep(0.01)
    client.shutdown()
    sys.exit(0)
value = (ctypes.c_float * 1)(1.0)
shape = (ctypes.c_int64 * 1)(1)
op = n.new_op(lib)
op.collective, op.name, op.dtype, op.ndim = n.ALLREDUCE, b"never.joined", n.FLOAT32, 1
op.shape, op.data, op.reduce_op = shape, ctypes.addressof(value), n.SUM
h = client.enqueue(op, "allreduce of 'never.joined'")
try:
    client.wait(h, "allreduce of 'never.joined'")
    print("UNEXPECTED SUCCESS")
except GradsyncError as e:
    print("ERROR:", e)
open(marks + "/rank0.done", "w").close()
client.shutdown()
"""


def test_a_stalled_collective_fails_with_the_daemons_message(tmp_path):
    out = run(["--private-daemon", "--daemon-arg=--stall-warning-seconds=1", "--daemon-arg=--stall-deadline-seconds=2",
               "-np", "2", PY, "-c", STALL_RANK, str(tmp_path)])
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(l for l in out.stdout.splitlines() if "ERROR:" in l)
    assert "never.joined" in line and "ranks [1]" in line, line
