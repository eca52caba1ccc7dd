# SPDX-License-Identifier: Apache-2.0
"""Elastic jobs end to end under gradsyncrun --min-np: a rank SIGKILLed in
the middle of a large allreduce; the survivors go on from the last commit.
On one daemon, and across two (two 'hosts' through a fake ssh)."""
import glob
import json
import os
import subprocess
import sys

import fake_hosts
from exact_model import replay

RUN = os.environ["GRADSYNCRUN"]
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_train.py")


def run_job(tmp_path, np, min_np, victim, *flags, base_env=None, **env):
    env = dict(base_env or os.environ, GRADSYNC_TEST_OUT=str(tmp_path), GRADSYNC_TEST_VICTIM=str(victim), **env)
    daemon = [] if "--ssh" in flags else ["--private-daemon"]
    return subprocess.run([RUN, *daemon, "-np", str(np), "--min-np", str(min_np), *flags, sys.executable, TRAIN],
                          capture_output=True, text=True, timeout=180, env=env)


def run_across_two_hosts(tmp_path, *flags, **env):
    """-np 3 on nodeA:1,nodeB:2, rank 1 (on nodeB, a follower) the victim."""
    with fake_hosts.daemons(tmp_path) as sockets:
        ssh, base = fake_hosts.ssh_env(tmp_path, sockets)
        return run_job(tmp_path, 3, 2, 1, "-H", "nodeA:1,nodeB:2", "--ssh", ssh, *flags, base_env=base, **env)


def committed_samples(tmp_path):
    committed = []
    for path in glob.glob(str(tmp_path / "samples.*")):
        committed += [int(i) for line in open(path) for i in line.split()]
    return sorted(committed)


def results(tmp_path):
    return {int(p.rsplit(".", 1)[1]): json.load(open(p)) for p in glob.glob(str(tmp_path / "result.*"))}


def discovery_script(tmp_path, hosts):
    """A --host-discovery-script printing `hosts` ('host:slots' lines)."""
    listed = tmp_path / "hosts"
    listed.write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % listed)
    script.chmod(0o755)
    return script


def assert_grown_to_three_at_step_zero(tmp_path):
    """Two ranks started, a third joined (epoch 2) before step 0 ended:
    10 steps at 3 ranks, every sample committed once."""
    done = results(tmp_path)
    assert sorted(done) == [0, 1, 2]
    expected = [w.hex() for w in replay([(s, 3) for s in range(10)])]
    for result in done.values():
        assert result["weights"] == expected and result["epoch"] == 2 and result["size"] == 3
    assert committed_samples(tmp_path) == list(range(60))


def test_a_killed_rank_leaves_the_survivors_training_from_the_last_commit(tmp_path):
    out = run_job(tmp_path, 3, 2, 1, "--on-rank-failure", "blacklist-host")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 1 exited with code 137; the elastic job goes on" in out.stderr
    done = results(tmp_path)
    assert sorted(done) == [0, 1]  # the survivors, renumbered
    # Steps 0-4 committed at size 3 (step 5 never committed: the victim died
    # inside it), then the 30 samples left over 2 ranks, 2 each: 8 steps.
    expected = [w.hex() for w in replay([(s, 3) for s in range(5)] + [(s, 2) for s in range(5, 13)])]
    for rank, result in done.items():
        assert result["weights"] == expected, (rank, result)
        assert result["epoch"] == 2 and result["size"] == 2 and result["steps"] == 13 and result["resets"] == [2]
    # Every sample of the epoch was committed exactly once, across the change.
    assert committed_samples(tmp_path) == list(range(60))


def test_past_the_reset_limit_gradsyncrun_stops_the_job(tmp_path):
    out = run_job(tmp_path, 3, 2, 1, "--reset-limit", "0")
    assert out.returncode != 0, out.stdout + out.stderr
    assert "rank 1 exited with code 137; the elastic job goes on" in out.stderr
    assert "stopping the job: ranks failed 1 times, more than --reset-limit 0" in out.stderr, out.stderr
    # No replacement was started (the survivors may have finished before
    # the stop reached them: the job is short).
    assert "starting [" not in out.stderr.split("more than --reset-limit 0")[1], out.stderr


def test_across_two_daemons_the_survivors_go_on_from_the_last_commit(tmp_path):
    out = run_across_two_hosts(tmp_path, "--on-rank-failure", "blacklist-host")
    assert out.returncode == 0, out.stdout + out.stderr
    done = results(tmp_path)
    assert sorted(done) == [0, 1]
    expected = [w.hex() for w in replay([(s, 3) for s in range(5)] + [(s, 2) for s in range(5, 13)])]
    for rank, result in done.items():
        assert result["weights"] == expected, (rank, result)
        assert result["epoch"] == 2 and result["size"] == 2 and result["steps"] == 13
    assert committed_samples(tmp_path) == list(range(60))


def test_across_two_daemons_a_replacement_joins_through_its_follower(tmp_path):
    out = run_across_two_hosts(tmp_path, GRADSYNC_TEST_WAIT_FOR="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "starting [3] to replace [1]; it joins at the next commit" in out.stderr
    done = results(tmp_path)
    assert sorted(done) == [0, 1, 2]
    expected = [w.hex() for w in replay([(s, 3) for s in range(10)])]
    for rank, result in done.items():
        assert result["weights"] == expected, (rank, result)
        assert result["epoch"] == 3 and result["size"] == 3 and result["steps"] == 10
    assert committed_samples(tmp_path) == list(range(60))


def test_a_replacement_joins_at_a_commit_and_receives_the_state(tmp_path):
    out = run_job(tmp_path, 3, 2, 1, GRADSYNC_TEST_WAIT_FOR="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "starting [3] to replace [1]; it joins at the next commit" in out.stderr
    done = results(tmp_path)
    assert sorted(done) == [0, 1, 2]  # old ranks 0 and 2, and the replacement
    # The survivors waited at step 5 for the replacement: 10 steps at size 3,
    # exactly as if no rank had died.
    expected = [w.hex() for w in replay([(s, 3) for s in range(10)])]
    for rank, result in done.items():
        assert result["weights"] == expected, (rank, result)
        assert result["epoch"] == 3 and result["size"] == 3 and result["steps"] == 10
    assert done[0]["resets"] == [2, 3] and done[1]["resets"] == [2, 3] and done[2]["resets"] == []
    assert committed_samples(tmp_path) == list(range(60))


def test_a_blacklisted_host_returns_after_its_cooldown(tmp_path):
    out = run_job(tmp_path, 3, 2, 1, "--on-rank-failure", "blacklist-host", "--blacklist-cooldown-range", "1", "5",
                  GRADSYNC_TEST_WAIT_FOR="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "host localhost blacklisted for 1 s (time 1)" in out.stderr
    assert "starting [3] on localhost, back from its blacklist cooldown" in out.stderr
    done = results(tmp_path)
    assert sorted(done) == [0, 1, 2]
    expected = [w.hex() for w in replay([(s, 3) for s in range(10)])]
    for result in done.values():
        assert result["weights"] == expected and result["size"] == 3
    assert committed_samples(tmp_path) == list(range(60))


def test_below_the_minimum_the_job_waits_for_a_replacement(tmp_path):
    # Two ranks, minimum two: the survivor waits (horovod#3494: no deadlock)
    # until the replacement joins, then both go on from the last commit.
    out = run_job(tmp_path, 2, 2, 1)
    assert out.returncode == 0, out.stdout + out.stderr
    done = results(tmp_path)
    expected = [w.hex() for w in replay([(s, 2) for s in range(15)])]
    assert sorted(done) == [0, 1]
    for result in done.values():
        assert result["weights"] == expected and result["epoch"] == 2 and result["size"] == 2
    assert committed_samples(tmp_path) == list(range(60))


def test_below_the_minimum_without_a_replacement_the_job_fails_after_the_timeout(tmp_path):
    out = run_job(tmp_path, 2, 2, 1, "--on-rank-failure", "blacklist-host", "--elastic-timeout", "2")
    assert out.returncode != 0
    assert "stayed below its minimum of 2 ranks for 2 s" in out.stdout + out.stderr
    assert results(tmp_path) == {}


def test_without_elastic_mode_run_syncs_once_and_errors_escape(tmp_path):
    env = dict(os.environ, GRADSYNC_TEST_OUT=str(tmp_path))
    out = subprocess.run([RUN, "--private-daemon", "-np", "2", sys.executable, TRAIN], capture_output=True, text=True,
                         timeout=180, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    done = results(tmp_path)
    expected = [w.hex() for w in replay([(s, 2) for s in range(15)])]
    assert done[0]["weights"] == expected and done[0]["epoch"] == 0 and done[0]["resets"] == []


def test_host_discovery_adds_a_rank_that_joins_at_a_commit(tmp_path):
    script = discovery_script(tmp_path, "localhost:3\n")
    # Two ranks start; the third slot's rank joins at a commit; training
    # waits for it at step 0: 10 steps at 3 ranks.
    out = run_job(tmp_path, 2, 2, -1, "--max-np", "3", "--host-discovery-script", str(script),
                  GRADSYNC_TEST_WAIT_FOR="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "host discovery offers 3 slots here; starting a new rank" in out.stderr
    assert_grown_to_three_at_step_zero(tmp_path)


def test_host_discovery_adds_a_new_host_whose_daemon_joins_the_running_job(tmp_path):
    script = discovery_script(tmp_path, "nodeA:1\nnodeB:1\nnodeC:1\n")
    # Two ranks start on nodeA and nodeB; discovery offers nodeC, whose
    # daemon joins the running job for its new rank; training waits for it
    # at step 0: 10 steps at 3 ranks across three daemons.
    with fake_hosts.daemons(tmp_path, hosts=("nodeA", "nodeB", "nodeC")) as sockets:
        ssh, base = fake_hosts.ssh_env(tmp_path, sockets)
        out = run_job(tmp_path, 2, 2, -1, "-H", "nodeA:1,nodeB:1", "--ssh", ssh, "--max-np", "3",
                      "--host-discovery-script", str(script), base_env=base, GRADSYNC_TEST_WAIT_FOR="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "starting [2] on nodeC, a new host offered by host discovery" in out.stderr
    assert_grown_to_three_at_step_zero(tmp_path)
