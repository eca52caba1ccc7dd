# SPDX-License-Identifier: Apache-2.0
"""Twenty random kill/replace cycles of an elastic job: no hang, one epoch
per change, identical weights equal to a replay of the logged schedule, and
the daemon's descriptors and arena mappings back to their baseline."""
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

from exact_model import replay
from gradsync.runner.daemon import PrivateDaemon

RUN = os.environ["GRADSYNCRUN"]
CTL = os.environ["GRADSYNC_CTL"]
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "churn_train.py")
CYCLES = int(os.environ.get("GRADSYNC_CHURN_CYCLES", "20"))


def daemon_resources(pid):
    fds = len(os.listdir("/proc/%d/fd" % pid))
    with open("/proc/%d/maps" % pid) as f:
        arenas = sum(1 for line in f if "memfd:" in line)
    return fds, arenas


def job_info(socket_path, job):
    out = subprocess.run([CTL, "--socket", socket_path, "--json", "jobs", job], capture_output=True, text=True,
                         timeout=10)
    jobs = json.loads(out.stdout).get("jobs", []) if out.returncode == 0 else []
    return jobs[0] if jobs else None


def rank_processes(job):
    """Pids of the job's rank processes (their environment names the job)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                environ = f.read().split(b"\0")
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ("GRADSYNC_JOB_ID=%s" % job).encode() in environ and b"churn_train.py" in cmdline:
            pids.append(int(entry))
    return pids


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.05)



def kill_and_replace(daemon, job, epochs, rng):
    for cycle in range(CYCLES):
        # Back at three ranks, all registered, training: then kill one at random.
        wait_until(lambda: (job_info(daemon.socket_path, job) or {}).get("size") == 3 and
                   len((job_info(daemon.socket_path, job) or {}).get("ranks", [])) == 3 and
                   int((job_info(daemon.socket_path, job) or {}).get("epoch", 0)) == epochs[-1], 60,
                   "cycle %d: the job back at 3 ranks, epoch %d" % (cycle, epochs[-1]))
        time.sleep(rng.uniform(0.1, 0.6))
        victim = rng.choice(rank_processes(job))
        os.kill(victim, signal.SIGKILL)
        epochs.append(epochs[-1] + 2)  # the loss, then the replacement's admission
    wait_until(lambda: int((job_info(daemon.socket_path, job) or {}).get("epoch", 0)) == epochs[-1], 60,
               "the last replacement")


def test_twenty_kill_and_replace_cycles(tmp_path):
    rng = random.Random(20261123)
    daemon = PrivateDaemon(os.environ["GRADSYNC_DAEMON"])
    try:
        baseline = daemon_resources(daemon._process.pid)
        job = "churn-%d" % os.getpid()
        env = dict(os.environ, GRADSYNC_TEST_OUT=str(tmp_path))
        run = subprocess.Popen([RUN, "--socket", daemon.socket_path, "--job-id", job, "-np", "3", "--min-np", "2",
                                sys.executable, TRAIN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
        try:
            epochs = [1]
            try:
                kill_and_replace(daemon, job, epochs, rng)
            except AssertionError as error:
                stuck = json.dumps(job_info(daemon.socket_path, job), indent=1)
                run.kill()
                out, _ = run.communicate()
                raise AssertionError("%s: %s\n%s\ndaemon log:\n%s" % (error, stuck, out[-8000:],
                                                                      daemon.log_text()[-8000:])) from None
            history = job_info(daemon.socket_path, job)["history"]
            assert [int(h["epoch"]) for h in history] == list(range(2, epochs[-1] + 1))
            assert all(h["size_before"] == 3 and h["size_after"] == 2 for h in history[0::2]), history
            assert all(h["size_before"] == 2 and h["size_after"] == 3 for h in history[1::2]), history
            steps = [int(line.split()[0]) for p in glob.glob(str(tmp_path / "steps.*")) for line in open(p)]
            with open(str(tmp_path / "stop_at"), "w") as f:
                f.write(str(max(steps) + 20))
            try:
                out, _ = run.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                stuck = json.dumps(job_info(daemon.socket_path, job), indent=1)
                run.kill()
                out, _ = run.communicate()
                raise AssertionError("the job did not finish: %s\n%s\ndaemon log:\n%s" % (
                    stuck, out[-8000:], daemon.log_text()[-8000:])) from None
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 0, out[-5000:]
        # One size per committed step, the same in every rank's log.
        sizes = {}
        for path in glob.glob(str(tmp_path / "steps.*")):
            for line in open(path):
                step, size = (int(x) for x in line.split())
                assert sizes.setdefault(step, size) == size, (step, size, sizes[step])
        assert sorted(sizes) == list(range(len(sizes)))
        expected = [w.hex() for w in replay(sorted(sizes.items()))]
        results = [json.load(open(p)) for p in glob.glob(str(tmp_path / "result.*"))]
        assert sorted(r["rank"] for r in results) == [0, 1, 2]
        for result in results:
            assert result["weights"] == expected and result["epoch"] == epochs[-1] and result["steps"] == len(sizes)
        # No more descriptors and no arena mapping left (a descriptor the
        # starting daemon still held may be gone: fewer is fine).
        wait_until(lambda: all(now <= then for now, then in zip(daemon_resources(daemon._process.pid), baseline)), 10,
                   "descriptors and arena mappings back to %s (now %s)" % (baseline,
                                                                           daemon_resources(daemon._process.pid)))
    finally:
        code, log = daemon.stop()
        assert code == 0, log[-5000:]


def test_host_discovery_removes_and_adds_ranks(tmp_path):
    """The discovery script's slots shrink from 3 to 2 (a rank is stopped,
    the job goes on at 2), then grow back (a new rank joins at a commit);
    the weights equal a replay of the logged schedule."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:3\n")
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(0o755)
    daemon = PrivateDaemon(os.environ["GRADSYNC_DAEMON"])
    job = "discovery-%d" % os.getpid()
    run = None
    try:
        env = dict(os.environ, GRADSYNC_TEST_OUT=str(tmp_path))
        run = subprocess.Popen([RUN, "--socket", daemon.socket_path, "--job-id", job, "-np", "3", "--min-np", "2",
                                "--host-discovery-script", str(script), sys.executable, TRAIN],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        info = lambda: job_info(daemon.socket_path, job) or {}
        wait_until(lambda: info().get("size") == 3 and int(info().get("commits", 0)) >= 3, 60, "training at 3")
        hosts.write_text("localhost:2\n")
        wait_until(lambda: info().get("size") == 2 and int(info().get("epoch", 0)) == 2, 30, "the job at 2")
        hosts.write_text("localhost:3\n")
        wait_until(lambda: info().get("size") == 3 and int(info().get("epoch", 0)) == 3, 30, "the job back at 3")
        steps = [int(line.split()[0]) for p in glob.glob(str(tmp_path / "steps.*")) for line in open(p)]
        with open(str(tmp_path / "stop_at"), "w") as f:
            f.write(str(max(steps) + 10))
        out, _ = run.communicate(timeout=120)
    finally:
        if run is not None and run.poll() is None:
            run.kill()
        code, log = daemon.stop()
    assert run.returncode == 0, out[-5000:]
    assert code == 0, log[-5000:]
    assert "host discovery offers 2 slots on localhost; stopping [2]" in out, out[-5000:]
    assert "host discovery offers 3 slots here; starting a new rank" in out, out[-5000:]
    sizes = {}
    for path in glob.glob(str(tmp_path / "steps.*")):
        for line in open(path):
            step, size = (int(x) for x in line.split())
            assert sizes.setdefault(step, size) == size, (step, size, sizes[step])
    expected = [w.hex() for w in replay(sorted(sizes.items()))]
    results = [json.load(open(p)) for p in glob.glob(str(tmp_path / "result.*"))]
    assert sorted(r["rank"] for r in results) == [0, 1, 2]
    for result in results:
        assert result["weights"] == expected and result["epoch"] == 3
